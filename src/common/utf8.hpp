#pragma once
// Text from the system (process names, command lines) is bytes, not UTF-8: any user can name a
// process "\xff". JSON must be UTF-8 (nlohmann::json throws on anything else), so every such
// string goes through valid_utf8 before it reaches a JSON document.

#include <string>
#include <string_view>

namespace zernel {

// `s` with every byte that does not start a well-formed UTF-8 sequence (overlong forms,
// surrogates and code points above U+10FFFF included) replaced by U+FFFD; valid text unchanged.
std::string valid_utf8(std::string_view s);

}  // namespace zernel
