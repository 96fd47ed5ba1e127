#!/usr/bin/env python3
"""An independent reference for the chunking rules of filesystem.md, "Indexing, by tokens".

It was written from the spec's sentences, not from the Rust code (src/index/chunk.rs),
and works in code points where the Rust code works in bytes, so the two only agree
when both follow the rules. It holds the cases of conformance/chunk.json (every
character a token: the plain character splitter) and conformance/chunk_tokens.json
(a token is a run of non-whitespace), each with the pieces worked out by hand (as
character ranges); it checks its own answer against the hand's, then writes the files.

    python3 conformance/tools/chunk_reference.py          # write both files
    python3 conformance/tools/chunk_reference.py --check  # fail if a file differs from what it would write
"""

import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
OUT = HERE.parent

# Rust's char::is_whitespace (Unicode White_Space), which Python's str.isspace does not quite match.
WHITESPACE = set("\t\n\x0b\x0c\r \x85\xa0\u1680\u2028\u2029\u202f\u205f\u3000") | {chr(c) for c in range(0x2000, 0x200B)}
MIN_CHARS = 40


def strip(s):
    i, j = 0, len(s)
    while i < j and s[i] in WHITESPACE:
        i += 1
    while j > i and s[j - 1] in WHITESPACE:
        j -= 1
    return s[i:j]


def starts_chars(text):
    """Every character is a token."""
    return list(range(len(text)))


def starts_whitespace(text):
    """A token is a run of non-whitespace: where each run begins."""
    return [i for i, c in enumerate(text) if c not in WHITESPACE and (i == 0 or text[i - 1] in WHITESPACE)]


def cut_in(text, s, w):
    """Where the window text[s:w] is cut: after a separator wholly in its last third, else at w."""
    length = w - s
    m = w - length // 3
    region = text[m:w]
    for patterns in (("\n\n", "\n\r\n"), ("\n",), (". ",)):
        ends = [m + region.rfind(p) + len(p) for p in patterns if region.rfind(p) >= 0]
        if ends:
            return max(ends)
    return w


def chunk(text, starts, size, overlap):
    """The pieces as (start, end) in characters, after dropping."""
    size = max(size, 1)
    toks = starts(text)
    spans = []
    s = 0
    while True:
        a = next((k for k, t in enumerate(toks) if t >= s), len(toks))
        if len(toks) - a <= size:
            spans.append((s, len(text)))
            break
        w = toks[a + size]
        assert w > s, "these tokenizers never start two tokens on one character"
        c = cut_in(text, s, w)
        spans.append((s, c))
        before = sum(1 for t in toks if t < c)
        k = min(max(before - overlap, a + 1), before)
        s = toks[k]
    if len(spans) == 1:
        return [sp for sp in spans if strip(text[sp[0]:sp[1]])]
    return [sp for sp in spans if len(strip(text[sp[0]:sp[1]])) >= MIN_CHARS]


def as_bytes(text, span):
    s, e = span
    return {"start": len(text[:s].encode()), "end": len(text[:e].encode()), "text": text[s:e]}


def case(name, about, text, size, overlap, hand):
    return {"name": name, "about": about, "text": text, "size": size, "overlap": overlap, "hand": hand}


HEX = "0123456789abcdef"

CHAR_CASES = [
    case("fits_one_piece", "64 characters, size 480: a text that fits is one piece.",
         "The quick brown fox jumps over the lazy dog.\nIt was not amused.\n", 480, 64, [(0, 64)]),
    case("fits_short_text_kept", "A text that fits is one piece even under 40 characters; the 40 only drops pieces of a text that was cut.",
         "Hello.", 480, 64, [(0, 6)]),
    case("paragraph_over_line_over_sentence",
         "Window 0..100, last third 67..100 holds \\n\\n at 70, '. ' at 80 and \\n at 90: the paragraph wins though it comes first (cut 72). "
         "The next piece starts 10 characters before the cut (62) and the rest (89) fits.",
         "a" * 70 + "\n\n" + "b" * 8 + ". " + "c" * 8 + "\n" + "d" * 60, 100, 10, [(0, 72), (62, 151)]),
    case("line_over_sentence",
         "Last third 67..100 holds \\n at 70 and a later '. ' at 81: the line break wins (cut 71); next starts at 61.",
         "a" * 70 + "\n" + "b" * 10 + ". " + "c" * 60, 100, 10, [(0, 71), (61, 143)]),
    case("sentence_cut", "Only '. ' (at 70) in the last third: cut just after its space (72); next at 62.",
         "a" * 70 + ". " + "b" * 70, 100, 10, [(0, 72), (62, 142)]),
    case("separators_before_last_third_ignored",
         "\\n\\n at 30 and \\n at 62 lie before the last third (67..100): hard cut at the window's end (100); next at 90.",
         "a" * 30 + "\n\n" + "b" * 30 + "\n" + "c" * 100, 100, 10, [(0, 100), (90, 163)]),
    case("separator_straddling_last_third_start_ignored",
         "'. ' at 66..68 straddles the last third's start (67): only its space is inside, so it is no separator there; hard cut at 100.",
         "a" * 66 + ". " + "b" * 100, 100, 10, [(0, 100), (90, 168)]),
    case("separator_just_inside_last_third",
         "'. ' at 67..69 lies wholly in the last third: cut 69, next 39 (overlap 30); then windows of b's are cut hard (139), next 109, the rest fits.",
         "a" * 67 + ". " + "b" * 100, 100, 30, [(0, 69), (39, 139), (109, 169)]),
    case("hard_cut_with_overlap", "No separator at all: cuts at each window's end (100, 180), each next piece 20 characters back.",
         HEX * 15, 100, 20, [(0, 100), (80, 180), (160, 240)]),
    case("trailing_piece_of_40_kept", "Overlap 0: pieces 0..100, 100..200, and the last 40 characters are kept (40 is not under 40).",
         HEX * 15, 100, 0, [(0, 100), (100, 200), (200, 240)]),
    case("tiny_trailing_piece_dropped", "Overlap 0: the last piece, 200..239, holds 39 characters and is dropped.",
         (HEX * 15)[:239], 100, 0, [(0, 100), (100, 200)]),
    case("trailing_piece_under_40_when_trimmed_dropped",
         "The last piece (100..145) is 45 characters, but 30 once trimmed of its 15 leading spaces: dropped (the 40 counts trimmed text).",
         "x" * 100 + " " * 15 + "y" * 30, 100, 0, [(0, 100)]),
    case("multibyte_text",
         "Characters of 2, 3 and 4 bytes; offsets are bytes, windows are characters. Window 0..60 (last third 40..60): the \\n at 40 gives cut 41; "
         "next 35, window 35..95 (last third 75..95): '. ' at 81 gives cut 83; next 77, window 77..137 has only emoji there: hard cut 137; "
         "next 131, and the rest (12 characters) is dropped.",
         "é" * 40 + "\n" + "中" * 40 + ". " + "😀" * 60, 60, 6, [(0, 41), (35, 83), (77, 137)]),
    case("crlf_paragraph",
         "\\r\\n\\r\\n at 68..72 is a paragraph break (it holds \\n\\r\\n wholly in the last third 67..100): cut 72, after all four, "
         "preferred to the later \\r\\n; next at 62 and the rest fits.",
         "a" * 68 + "\r\n\r\n" + "b" * 10 + "\r\n" + "c" * 60, 100, 10, [(0, 72), (62, 144)]),
    case("crlf_line", "A \\r\\n at 70..72 is a line break; the cut is after the \\n (72).",
         "a" * 70 + "\r\n" + "b" * 70, 100, 10, [(0, 72), (62, 142)]),
    case("crlf_split_by_hard_cut",
         "The \\r at 99 is in the window but its \\n (100) is not, and a lone \\r is no line break: hard cut at 100, between them.",
         "a" * 99 + "\r\n" + "b" * 60, 100, 10, [(0, 100), (90, 161)]),
    case("whitespace_only_fits", "A text of only whitespace gives no piece.", " \n\t \r\n  ", 480, 64, []),
    case("whitespace_only_cut", "A longer text of only whitespace is cut, and every piece is dropped.",
         " " * 50 + "\n\n" * 30 + " " * 50, 40, 5, []),
    case("empty_text", "An empty text gives no piece.", "", 480, 64, []),
    case("overlap_larger_than_a_piece_still_progresses",
         "Overlap 55 with size 60: the first cut (\\n at 40, cut 41) has 41 tokens before it, so the next piece starts one token on (1) "
         "instead of before the start; later pieces are cut hard and step 5 characters.",
         "a" * 40 + "\n" + "b" * 30, 60, 55, [(0, 41), (1, 61), (6, 66), (11, 71)]),
]

PROSE = (
    "Uploads are retried when the server answers 503. The client waits a second, then two, then four.\n"
    "After five tries it gives up and reports the failure.\n\n"
    "Downloads are never retried: a partial file is deleted and the error is shown at once.\n"
)

TOKEN_CASES = [
    case("fits_by_tokens_not_characters",
         "Ten words of 30 characters (309 characters) and size 10: ten tokens fit, so one piece, though far longer than 10 characters.",
         " ".join([c * 30 for c in "abcdefghij"]), 10, 2, [(0, 309)]),
    case("paragraph_over_line_over_sentence",
         "Words of 5 characters. Window: tokens 0..12, up to w013's start (62); its last third 42..62 holds \\n\\n at 44, "
         "'. ' at 50 and \\n at 56: the paragraph wins though it comes first (cut 46). 9 tokens precede the cut; overlap 3 starts the next piece at w007 (30). "
         "Window 30..92 has no separator in 72..92: hard cut at w019 (92); next at w016 (77); the rest, 11 tokens, fits.",
         "w001 w002 w003 w004 w005 w006 w007 w008 w009\n\nw010. w011\nw012 " + " ".join("w%03d" % k for k in range(13, 27)),
         12, 3, [(0, 46), (30, 92), (77, 131)]),
    case("line_over_sentence",
         "Window up to w013 (61); its last third 41..61 holds \\n at 44 and '. ' at 49: the line break wins (cut 45); next at w007 (30); "
         "then a hard cut at w019 (91), next at w016 (76).",
         "w001 w002 w003 w004 w005 w006 w007 w008 w009\nw010. w011 w012 " + " ".join("w%03d" % k for k in range(13, 27)),
         12, 3, [(0, 45), (30, 91), (76, 130)]),
    case("sentence_cut",
         "Only '. ' (after 'w009.', at 44) in the last third 41..61: cut after its space (46); 9 tokens before it, next at w007 (30).",
         "w001 w002 w003 w004 w005 w006 w007 w008 w009. w010 w011 w012 " + " ".join("w%03d" % k for k in range(13, 27)),
         12, 3, [(0, 46), (30, 91), (76, 130)]),
    case("separator_outside_last_third_ignored",
         "The \\n\\n after w002 (at 9) lies before the last third (38..56): hard cut at the window's end, the start of token 11 (w012, 56), "
         "so the piece keeps the space after w011; next at w009 (41).",
         "w001 w002\n\nw003 w004 w005 w006 w007 w008 w009 w010 w011 " + " ".join("w%03d" % k for k in range(12, 28)),
         11, 3, [(0, 56), (41, 96), (81, 135)]),
    case("window_ends_at_next_token_start",
         "Size 4 over long words: the window runs to the start of the fifth word (51), taking the whitespace (here \\n\\n) before it, "
         "so the cut just after the paragraph break is also the window's end; next at the fourth word (39), and the rest fits.",
         "alphaalphaaa betabetabeta gammagammaga deltadelta\n\nepsilonepsil zetazetazeta etaetaetaeta",
         4, 1, [(0, 51), (39, 89)]),
    case("overlap_counts_tokens_not_characters",
         "Hard cut before w011 (50); 10 tokens precede it, overlap 4: the next piece starts at w007 (30), 4 words back, not 4 characters.",
         " ".join("w%03d" % k for k in range(1, 22)), 10, 4, [(0, 50), (30, 80), (60, 104)]),
    case("long_whitespace_counts_for_thirds",
         "Whitespace between tokens counts in the window's characters: 40 spaces after w004 make the window 0..89 (up to w011), "
         "whose last third 60..89 holds the \\n at 68: cut 69; next at w005 (59), two tokens back.",
         "w001 w002 w003 w004" + " " * 40 + "w005 w006\nw007 w008 w009 w010 w011 w012 w013 w014",
         10, 2, [(0, 69), (59, 108)]),
    case("overlap_zero_skips_whitespace_after_cut",
         "Overlap 0: the cut is after \\n\\n (46) and the next piece starts at the next token (w010, 50), so the four spaces between belong to no piece.",
         "w001 w002 w003 w004 w005 w006 w007 w008 w009\n\n    " + " ".join("w%03d" % k for k in range(10, 22)),
         12, 0, [(0, 46), (50, 109)]),
    case("tiny_trailing_piece_dropped",
         "Overlap 0, hard cuts at 50 and 100; the last piece ('w021 w022 w023', 14 characters) is dropped.",
         " ".join("w%03d" % k for k in range(1, 24)), 10, 0, [(0, 50), (50, 100)]),
    case("leading_whitespace_in_first_piece",
         "The first piece starts at 0, leading whitespace included (hard cut at w011, 55); later pieces start at a token (w009, 45; w017, 85).",
         "\n\n   " + " ".join("w%03d" % k for k in range(1, 26)), 10, 2, [(0, 55), (45, 95), (85, 129)]),
    case("multibyte_words",
         "Words of 2-, 3- and 4-byte characters; offsets are bytes, on character boundaries. Window up to token 11 (character 56), last third 38..56: "
         "cut after '. ' (character 51); next two tokens back (character 40); the rest fits.",
         "éééé ëëëë 中文中文 日本語日 😀😀😀😀 ἀἀἀἀ éééé ëëëë 中文中文 日本語日. 😀😀😀😀 ἀἀἀἀ éééé ëëëë 中文中文 日本語日 😀😀😀😀 ἀἀἀἀ",
         11, 2, [(0, 51), (40, 90)]),
    case("crlf",
         "CRLF text: \\r\\n\\r\\n after w009 (44..48) is a paragraph break: cut after its last \\n (48), preferred to the later \\r\\n; "
         "next at w007 (30); then a hard cut at w019 (94), next at w016 (79).",
         "w001 w002 w003 w004 w005 w006 w007 w008 w009\r\n\r\nw010 w011\r\nw012 " + " ".join("w%03d" % k for k in range(13, 27)),
         12, 3, [(0, 48), (30, 94), (79, 133)]),
    case("whitespace_only", "No tokens at all: the text fits and, being only whitespace, gives no piece.",
         "   \n\n\t\r\n  \u3000 ", 12, 3, []),
    case("defaults_on_prose", "Size 480 and overlap 64 on a short document: it fits, one piece.",
         PROSE, 480, 64, [(0, len(PROSE))]),
]

FILES = {
    "chunk.json": {
        "tokenizer": "chars",
        "starts": starts_chars,
        "cases": CHAR_CASES,
        "about": [
            "The character splitter of filesystem.md, 'Indexing, by tokens': every character is a token.",
            "Each case: text, size and overlap (in tokens) and the pieces kept, in order; start and end are UTF-8 byte offsets (end exclusive), text is exactly text[start:end], untrimmed.",
            "Rules: a text of at most size tokens is one piece (none when it is only whitespace). Otherwise the window runs from the piece's start to the start of the token size tokens on. "
            "The cut is looked for in the window's last floor(L/3) characters (L its characters), a separator lying wholly there: just after the last paragraph break (\\n\\n, or \\n\\r\\n so CRLF counts), "
            "else the last line break (\\n), else the last '. ', else at the window's end. The next piece starts at the token overlap tokens before the cut (of those starting before it), "
            "but at least one token after the piece's own first token. When the text was cut, pieces with fewer than 40 characters once trimmed of whitespace (Unicode White_Space) are dropped.",
            "Positions named in a case's about are character indices (they are what the hand worked with).",
            "Generated and checked by conformance/tools/chunk_reference.py, an implementation of those rules independent of the Rust code; each case's pieces were also worked out by hand and the script checks its answer against them.",
        ],
    },
    "chunk_tokens.json": {
        "tokenizer": "whitespace",
        "starts": starts_whitespace,
        "cases": TOKEN_CASES,
        "about": [
            "The same rules with a stand-in tokenizer: a token is a run of non-whitespace (Unicode White_Space), so whitespace belongs to no token and a window ends at the start of the next token, whitespace included.",
            "Case format and rules: as in chunk.json; positions named in a case's about are character indices. Tokens are counted over the whole text; a piece's tokens are those starting inside it.",
            "Generated and checked by conformance/tools/chunk_reference.py (independent of the Rust code; pieces also worked out by hand).",
        ],
    },
}


def build(name):
    spec = FILES[name]
    cases = []
    for c in spec["cases"]:
        got = chunk(c["text"], spec["starts"], c["size"], c["overlap"])
        if got != [tuple(h) for h in c["hand"]]:
            sys.exit(f"{name} {c['name']}: the reference gives {got}, the hand {c['hand']}")
        cases.append({
            "name": c["name"], "about": c["about"], "text": c["text"], "size": c["size"], "overlap": c["overlap"],
            "pieces": [as_bytes(c["text"], sp) for sp in got],
        })
    doc = {"about": spec["about"], "tokenizer": spec["tokenizer"], "cases": cases}
    return json.dumps(doc, ensure_ascii=False, indent=2) + "\n"


def main():
    check = "--check" in sys.argv[1:]
    bad = False
    for name in FILES:
        text = build(name)
        path = OUT / name
        if check:
            if not path.exists() or path.read_text(encoding="utf-8") != text:
                print(f"{path} differs from the reference's answer")
                bad = True
        else:
            path.write_text(text, encoding="utf-8")
            print(f"wrote {path}")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
