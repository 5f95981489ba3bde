// `tensorfold quantize`: a bf16/f16/f32 checkpoint to the MLX affine-quantized layout.
#include <cstdio>

#include "cli/commands.h"
#include "cli/common.h"
#include "core/error.h"
#include "backends/backends.h"
#include "loader/quantize.h"

namespace tf::cli {

void register_quantize_command(CLI::App& app) {
  struct Flags {
    std::string in_dir, out_dir;
    QuantizeOptions options;
  };
  auto flags = std::make_shared<Flags>();
  CLI::App* cmd = app.add_subcommand("quantize", "Write an MLX affine-quantized copy of a checkpoint");
  cmd->add_option("--model", flags->in_dir, "Source model directory")->required();
  cmd->add_option("--out", flags->out_dir, "Destination directory (created)")->required();
  cmd->add_option("--bits", flags->options.bits, "Bits per weight")
      ->check(CLI::IsMember({4, 8}))->capture_default_str();
  cmd->add_option("--group-size", flags->options.group_size, "Weights per scale and bias")
      ->check(CLI::IsMember({32, 64, 128}))->capture_default_str();
  cmd->callback([flags] {
    if (flags->in_dir == flags->out_dir) fail("--out must differ from --model");
    check_model_dir(flags->in_dir);  // a source the engine would refuse makes a copy it would refuse too
    quantize_model_dir(flags->in_dir, flags->out_dir, flags->options, stderr_progress("quantizing"));
    std::fprintf(stderr, "wrote %s (%d-bit, group size %d)\n", flags->out_dir.c_str(),
                 flags->options.bits, flags->options.group_size);
  });
}

}  // namespace tf::cli
