#pragma once
// TOML value spellings shared by the dumper and the parser's messages (internal to config/).

#include <string>
#include <string_view>

namespace zernel::config::detail {

// The shortest text that reads back as exactly `value`, always with a decimal point or an
// exponent so that TOML reads it as a float ("1.0", "0.3", "1e-07"); "nan"/"inf" as TOML spells
// them. The parser reads a double and narrows it to float, so the text is checked to survive that
// double rounding, and the float's exact double value is printed in the rare case it does not.
std::string format_float(float value);

// The same for a double (parse messages about the value as written).
std::string format_double(double value);

// A TOML basic string, quoted and escaped.
std::string quote(std::string_view text);

}  // namespace zernel::config::detail
