// GPT-2's ByteLevel alphabet (HF `bytes_to_unicode`): each byte stands for one printable code
// point, so byte-level BPE vocabularies can be stored as text. Printable Latin-1 bytes map to
// themselves; the other 68 (controls, space, 0x7F-0xA0, 0xAD) map to U+0100.. in byte order,
// e.g. ' ' -> 'Ġ' (U+0120), '\n' -> 'Ċ' (U+010A).
#pragma once

#include <string>
#include <string_view>

namespace flide::tok {

// Appends the alphabet's UTF-8 for every byte of `bytes`.
void byte_level_encode(std::string_view bytes, std::string& out);

// Appends the bytes one token stands for. A token with a character outside the alphabet (an
// added token such as "<|im_end|>" is inside it; one with a raw space is not) is appended
// unchanged, as HF's ByteLevel decoder does.
void byte_level_decode(std::string_view token, std::string& out);

}  // namespace flide::tok
