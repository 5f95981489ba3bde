// tensorfold: the command-line entry point; each subcommand lives in its own file.
#include <cstdio>

#include "cli/commands.h"
#include "core/error.h"

int main(int argc, char** argv) {
  CLI::App app{"TensorFold: exact speculative inference for Qwen models"};
  app.require_subcommand(1);
  tf::cli::register_generate_command(app);
  tf::cli::register_tokenize_command(app);
  tf::cli::register_eval_command(app);
  tf::cli::register_quantize_command(app);
  tf::cli::register_bench_command(app);
  tf::cli::register_spec_bench_command(app);
  tf::cli::register_spec_eval_command(app);
  tf::cli::register_serve_command(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const tf::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "internal error: %s\n", e.what());
    return 2;
  }
  return 0;
}
