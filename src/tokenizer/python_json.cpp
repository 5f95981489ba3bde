// Python's json.dumps, json.loads' integers and str.strip, byte for byte, for rendering chat
// templates natively.
#include "tokenizer/python_json.h"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <vector>

#include "core/error.h"
#include "tokenizer/utf8.h"

namespace tf {
namespace {

// The binary subtype that marks an integer past 64 bits, its digits as written ("IN").
constexpr std::uint64_t kIntegerDigitsSubtype = 0x494E;

// nlohmann's DOM builder, except that an integer literal too large for 64 bits (the only integer it
// hands over as a float) keeps its digits. One past a double's range never gets here: the parser
// refuses it as it refuses 1e400.
class IntegerKeepingBuilder : public nlohmann::detail::json_sax_dom_parser<nlohmann::ordered_json> {
 public:
  using json_sax_dom_parser::json_sax_dom_parser;

  bool number_float(double value, const std::string& text) {
    if (text.find_first_of(".eE") != std::string::npos) return json_sax_dom_parser::number_float(value, text);
    binary_t digits(std::vector<std::uint8_t>(text.begin(), text.end()), kIntegerDigitsSubtype);
    return binary(digits);
  }
};

nlohmann::ordered_json loads(std::string_view text, bool allows_exceptions) {
  nlohmann::ordered_json parsed;
  IntegerKeepingBuilder builder(parsed, allows_exceptions);
  const bool is_parsed = nlohmann::ordered_json::sax_parse(text, &builder);
  if (!is_parsed || builder.is_errored()) return nlohmann::ordered_json::value_t::discarded;
  return parsed;
}

void append_string(const std::string& s, std::string& out) {
  out += '"';
  for (unsigned char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (c < 0x20) {
          char escaped[8];
          std::snprintf(escaped, sizeof escaped, "\\u%04x", unsigned(c));
          out += escaped;
        } else {
          out += char(c);
        }
    }
  }
  out += '"';
}

// repr(float): the shortest digits that round-trip, positional when the decimal exponent is in
// [-4, 16), else d.ddde+XX; an integral positional value keeps ".0".
void append_float(double x, std::string& out) {
  if (!std::isfinite(x)) fail("a JSON number is not finite");  // nlohmann never parses one
  char buffer[64];
  const auto result = std::to_chars(buffer, buffer + sizeof buffer, x, std::chars_format::scientific);
  std::string scientific(buffer, result.ptr);  // e.g. "-1.2345e+17", "5e-05"
  const size_t e = scientific.find('e');
  const int exponent = std::stoi(scientific.substr(e + 1));
  std::string mantissa = scientific.substr(0, e);
  const bool is_negative = mantissa[0] == '-';
  if (is_negative) mantissa.erase(0, 1);
  std::string digits;
  for (char c : mantissa)
    if (c != '.') digits += c;
  if (is_negative) out += '-';
  if (exponent < -4 || exponent >= 16) {
    out += digits.substr(0, 1);
    if (digits.size() > 1) out += "." + digits.substr(1);
    char exp_text[16];  // room for any int exponent, so the compiler can see nothing is cut
    std::snprintf(exp_text, sizeof exp_text, "e%c%02d", exponent < 0 ? '-' : '+', std::abs(exponent));
    out += exp_text;
    return;
  }
  if (exponent < 0) {
    out += "0." + std::string(size_t(-exponent - 1), '0') + digits;
    return;
  }
  const size_t n_integer = size_t(exponent) + 1;
  if (digits.size() <= n_integer) {
    out += digits + std::string(n_integer - digits.size(), '0') + ".0";
  } else {
    out += digits.substr(0, n_integer) + "." + digits.substr(n_integer);
  }
}

void append_value(const nlohmann::ordered_json& value, std::string& out) {
  switch (value.type()) {
    case nlohmann::json::value_t::null: out += "null"; return;
    case nlohmann::json::value_t::boolean: out += value.get<bool>() ? "true" : "false"; return;
    case nlohmann::json::value_t::number_integer: out += std::to_string(value.get<int64_t>()); return;
    case nlohmann::json::value_t::number_unsigned: out += std::to_string(value.get<uint64_t>()); return;
    case nlohmann::json::value_t::number_float: append_float(value.get<double>(), out); return;
    case nlohmann::json::value_t::string: append_string(value.get_ref<const std::string&>(), out); return;
    case nlohmann::json::value_t::binary: {
      const auto& binary = value.get_binary();
      if (!binary.has_subtype() || binary.subtype() != kIntegerDigitsSubtype) break;
      out.append(binary.begin(), binary.end());
      return;
    }
    case nlohmann::json::value_t::array: {
      out += '[';
      bool is_first = true;
      for (const auto& item : value) {
        if (!is_first) out += ", ";
        is_first = false;
        append_value(item, out);
      }
      out += ']';
      return;
    }
    case nlohmann::json::value_t::object: {
      out += '{';
      bool is_first = true;
      for (const auto& [key, item] : value.items()) {
        if (!is_first) out += ", ";
        is_first = false;
        append_string(key, out);
        out += ": ";
        append_value(item, out);
      }
      out += '}';
      return;
    }
    default: break;
  }
  fail("a JSON value of type " + std::string(value.type_name()) + " has no JSON text");
}

}  // namespace

std::string python_json_dumps(const nlohmann::ordered_json& value) {
  std::string out;
  append_value(value, out);
  return out;
}

nlohmann::ordered_json python_json_loads(std::string_view text) { return loads(text, true); }

nlohmann::ordered_json python_json_loads_or_discarded(std::string_view text) { return loads(text, false); }

bool is_python_space(char32_t c) {
  // Bidirectional classes WS, B and S plus the Zs category: White_Space and the four separators.
  return utf8::is_unicode_whitespace(c) || (c >= 0x1C && c <= 0x1F);
}

std::string python_strip(const std::string& text) {
  std::string_view s = text;
  size_t begin = 0, end = s.size();
  while (begin < end) {
    const utf8::Sequence sequence = utf8::sequence_at(s, begin);
    if (sequence.kind != utf8::SequenceKind::complete ||
        !is_python_space(utf8::decode_at(s, begin, sequence.length)))
      break;
    begin += sequence.length;
  }
  while (end > begin) {
    size_t lead = end - 1;
    while (lead > begin && (static_cast<unsigned char>(s[lead]) & 0xC0) == 0x80) --lead;
    const utf8::Sequence sequence = utf8::sequence_at(s, lead);
    if (sequence.kind != utf8::SequenceKind::complete || lead + sequence.length != end ||
        !is_python_space(utf8::decode_at(s, lead, sequence.length)))
      break;
    end = lead;
  }
  return std::string(s.substr(begin, end - begin));
}

}  // namespace tf
