"""JSON Schema's ECMA-262 patterns, matched in linear time.

A schema's ``pattern`` comes from outside (an agent's ``args_schema``), and a backtracking
engine holds the GIL for as long as a bad pattern takes. So a pattern is compiled twice:
by ``regress``, which says whether it is ECMA-262 (with the ``u`` flag), and, translated
here, by RE2, which alone ever runs it. What RE2 cannot run in linear time (backreferences,
lookaround) or what the translation does not know is refused (``PatternRefused``).

The translation keeps ECMA's meaning where RE2's differs: ``.`` stops at every ECMA line
terminator, ``\\s`` is ECMA's white space, ``$`` is the end of the text only, and every literal
is a code point. ``\\d``, ``\\w`` and ``\\b`` are ASCII in both.
"""

from __future__ import annotations

import functools
import re

import re2
import regress

_OPTIONS = re2.Options()
_OPTIONS.log_errors = False  # a refused pattern is the caller's answer, not a server log line
# RE2 compiles holding the GIL, in time that grows with the program: with its default 8 MiB one
# pattern (\p{L}{400}) took 300 ms and stalled every other thread. At 1 MiB it is refused in 9 ms,
# and what fits (\p{L}{50}) compiles in about 30 ms; argschema bounds a schema's sum.
_OPTIONS.max_mem = 1 << 20
_MAX = 0x10FFFF
_REPEAT_MAX = 1000
# ECMA's WhiteSpace and LineTerminator, as code point ranges.
_SPACE = [
    (0x9, 0xD),
    (0x20, 0x20),
    (0xA0, 0xA0),
    (0x1680, 0x1680),
    (0x2000, 0x200A),
    (0x2028, 0x2029),
    (0x202F, 0x202F),
    (0x205F, 0x205F),
    (0x3000, 0x3000),
    (0xFEFF, 0xFEFF),
]
_CONTROL_ESCAPES = {"t": 0x9, "n": 0xA, "v": 0xB, "f": 0xC, "r": 0xD}
_GENERAL_CATEGORY = re.compile(r"(?:General_Category=|gc=)?([A-Z][a-z]?)")
_SCRIPT = re.compile(r"(?:Script|sc)=([A-Za-z_]+)")


class PatternRefused(ValueError):
    """A pattern that is not ECMA-262, or that cannot be matched in linear time; the message says which and why."""


def _cp(code: int) -> str:
    return f"\\x{{{code:x}}}"


def _ranges(pairs: list[tuple[int, int]]) -> str:
    return "".join(_cp(a) if a == b else f"{_cp(a)}-{_cp(b)}" for a, b in pairs)


def _complement(pairs: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out, start = [], 0
    for a, b in pairs:
        if a > start:
            out.append((start, a - 1))
        start = b + 1
    return out + ([(start, _MAX)] if start <= _MAX else [])


_ANY_BUT_LINE_END = f"[^{_ranges([(0xA, 0xA), (0xD, 0xD), (0x2028, 0x2029)])}]"


class _Translator:
    """One pass over a pattern ``regress`` has already accepted, so only valid ECMA-262 syntax is met."""

    def __init__(self, pattern: str) -> None:
        self.src = pattern
        self.i = 0

    def peek(self, offset: int = 0) -> str:
        j = self.i + offset
        return self.src[j] if j < len(self.src) else ""

    def take(self, n: int = 1) -> str:
        text = self.src[self.i : self.i + n]
        self.i += n
        return text

    def run(self) -> str:
        out = []
        while self.i < len(self.src):
            c = self.take()
            if c == "\\":
                out.append(self.escape(in_class=False))
            elif c == "[":
                out.append(self.klass())
            elif c == ".":
                out.append(_ANY_BUT_LINE_END)
            elif c == "^":
                out.append("^")
            elif c == "$":
                out.append("\\z")
            elif c == "(":
                out.append(self.group())
            elif c in ")|*+?":
                out.append(c)
            elif c == "{":  # with the u flag a brace is only ever a quantifier
                end = self.src.index("}", self.i)
                counts = self.take(end - self.i + 1)[:-1]
                # RE2 repeats at most 1,000 times, and reads a count it cannot parse as literal text.
                if any(int(n) > _REPEAT_MAX for n in counts.split(",") if n):
                    raise PatternRefused(f"a repeat over {_REPEAT_MAX:,} ({{{counts}}}) is not matched by this server")
                out.append(f"{{{counts}}}")
            else:
                out.append(c if c.isascii() and c.isalnum() else _cp(ord(c)))
        return "".join(out)

    def group(self) -> str:
        if self.peek() != "?":
            return "(?:"  # nothing refers back to a group, so none needs to capture
        if self.peek(1) == ":":
            self.take(2)
            return "(?:"
        if self.peek(1) == "<" and self.peek(2) not in ("=", "!"):
            self.i = self.src.index(">", self.i) + 1
            return "(?:"
        if self.peek(1) in "=!" or self.src[self.i + 1 : self.i + 3] in ("<=", "<!"):
            raise PatternRefused("lookahead and lookbehind cannot be matched in linear time")
        raise PatternRefused("a group's flags (such as (?i:...)) are not matched by this server")

    def escape(self, *, in_class: bool) -> str:
        """The escape after a backslash: a class item (in a class) or an atom."""
        c = self.take()
        if c in "dDwW":
            return "\\" + c
        if c == "s":
            return _ranges(_SPACE) if in_class else f"[{_ranges(_SPACE)}]"
        if c == "S":
            return _ranges(_complement(_SPACE)) if in_class else f"[^{_ranges(_SPACE)}]"
        if c in "bB":
            return _cp(0x8) if in_class else "\\" + c
        if c in "pP":
            return self.property(negated=c == "P")
        if c.isdigit() and c != "0" or c == "k":
            raise PatternRefused("a backreference cannot be matched in linear time")
        return _cp(self.code_point(c))

    def code_point(self, c: str) -> int:
        if c in _CONTROL_ESCAPES:
            return _CONTROL_ESCAPES[c]
        if c == "0":
            return 0
        if c == "c":
            return ord(self.take()) % 32
        if c == "x":
            return int(self.take(2), 16)
        if c == "u":
            return self.unicode_escape()
        return ord(c)  # an identity escape: ^ $ \ . * + ? ( ) [ ] { } | / -

    def unicode_escape(self) -> int:
        if self.peek() == "{":
            end = self.src.index("}", self.i)
            code = int(self.src[self.i + 1 : end], 16)
            self.i = end + 1
        else:
            code = int(self.take(4), 16)
            if 0xD800 <= code <= 0xDBFF and self.src[self.i : self.i + 2] == "\\u":
                low = int(self.src[self.i + 2 : self.i + 6], 16) if len(self.src) >= self.i + 6 else 0
                if 0xDC00 <= low <= 0xDFFF:
                    self.i += 6
                    return 0x10000 + ((code - 0xD800) << 10) + (low - 0xDC00)
        if 0xD800 <= code <= 0xDFFF:
            raise PatternRefused(f"a lone surrogate (\\u{code:04x}) matches no text this server checks")
        return code

    def property(self, *, negated: bool) -> str:
        end = self.src.index("}", self.i)
        name = self.src[self.i + 1 : end]
        self.i = end + 1
        found = _SCRIPT.fullmatch(name) or _GENERAL_CATEGORY.fullmatch(name)
        if found:
            name = found.group(1)
        else:
            raise PatternRefused(
                f"the Unicode property \\p{{{name}}} is not one this server matches "
                "(a general category such as L or Nd, or Script=Name)"
            )
        return f"\\{'P' if negated else 'p'}{{{name}}}"

    def klass(self) -> str:
        negated = self.peek() == "^"
        if negated:
            self.take()
        # (RE2 text, whether it may start a range: one code point, not itself a range's end)
        items: list[tuple[str, bool]] = []
        while self.peek() != "]":
            c = self.take()
            if c == "-" and items and items[-1][1] and self.peek() != "]":
                items.append(("-", False))
                continue
            if c == "\\":
                text = self.escape(in_class=True)
                single = text.startswith("\\x{") and text.count("\\x") == 1
            else:
                text, single = _cp(ord(c)), True
            items.append((text, single and not (items and items[-1][0] == "-")))
        self.take()
        body = "".join(text for text, _ in items)
        if not body:
            return f"[{_ranges([(0, _MAX)])}]" if negated else f"[^{_ranges([(0, _MAX)])}]"
        return f"[{'^' if negated else ''}{body}]"


@functools.lru_cache(maxsize=1024)
def pattern_compile(pattern: str) -> re2._Regexp:
    """RE2's program for an ECMA-262 ``pattern`` with the ``u`` flag; ``PatternRefused`` says why there is none."""
    if (why := _ecma_refusal(pattern)) is not None:
        raise PatternRefused(f"{pattern!r} is not an ECMA-262 regular expression ({why})")
    try:
        translated = _Translator(pattern).run()
    except PatternRefused as exc:
        raise PatternRefused(f"{pattern!r} cannot be checked: {exc}") from None
    try:
        return re2.compile(translated, _OPTIONS)
    except re2.error as exc:
        raise PatternRefused(f"{pattern!r} cannot be checked in linear time ({_re2_reason(exc)})") from None


def pattern_is_ecma(pattern: str) -> bool:
    """Whether ``pattern`` is an ECMA-262 regular expression (JSON Schema's ``format: regex``), whether or not RE2 runs it."""
    return _ecma_refusal(pattern) is None


def _ecma_refusal(pattern: str) -> str | None:
    """Why ``regress`` does not take ``pattern`` as ECMA-262 with the ``u`` flag, or None."""
    try:
        regress.Regex(pattern, "u")
    except regress.RegressError as exc:
        return str(exc)
    except UnicodeEncodeError:
        return "a lone surrogate is not text"
    return None


def _re2_reason(exc: Exception) -> str:
    reason = exc.args[0] if exc.args else exc
    return reason.decode(errors="replace") if isinstance(reason, bytes) else str(reason)


def pattern_search(pattern: str, text: str) -> bool:
    """Whether ``pattern`` (already accepted by ``pattern_compile``) finds a match in ``text``, as ECMA-262 would."""
    try:
        return pattern_compile(pattern).search(text) is not None
    except UnicodeEncodeError:  # a lone surrogate: no ECMA pattern this server accepts matches it
        return False
