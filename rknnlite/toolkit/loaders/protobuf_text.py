"""A schema-less reader of the protobuf text format (``.prototxt``, ``.pbtxt``).

:func:`parse_text` turns the text into a tree of :class:`TextMessage` objects without
knowing the schema, which is what a loader needs to read a Caffe ``.prototxt`` without
Caffe's generated classes.  What the text format allows and this reader accepts:

* ``name: value`` scalars, ``name { ... }`` / ``name: { ... }`` / ``name < ... >``
  nested messages, any field repeated, and the short list form ``name: [1, 2, 3]``;
* ``#`` comments, optional ``,`` or ``;`` after a field;
* strings in single or double quotes with C escapes (``\\n``, ``\\t``, ``\\"``, ``\\\\``,
  octal ``\\101``, hex ``\\x41``); adjacent strings are concatenated;
* numbers: decimal, hexadecimal (``0x1F``) and octal (``017``) integers, floats with an
  exponent or an ``f`` suffix, a leading ``-``/``+``; ``inf``/``nan`` as identifiers;
* identifiers (enum values, ``true``/``false``) are kept as :class:`Identifier` strings,
  so the schema's reader decides what they mean.

Extension fields (``[pkg.ext] { ... }``) and ``Any`` expansions are not supported.
Errors raise :class:`TextFormatError` with the line and column.
"""

from __future__ import annotations

import re
from typing import Any, Dict, Iterator, List, Optional, Tuple

__all__ = ["TextMessage", "Identifier", "TextFormatError", "parse_text"]


class TextFormatError(ValueError):
    """The text is not valid protobuf text format; ``line``/``column`` are 1-based."""

    def __init__(self, message: str, line: int, column: int):
        self.line = line
        self.column = column
        super().__init__(f"line {line}, column {column}: {message}")


class Identifier(str):
    """An unquoted word in the text (an enum value, ``true``, ``inf``...)."""


class TextMessage:
    """One message of the text: each field name maps to the list of its values, in
    order (a field written once is a one-element list).  Values are ``int``, ``float``,
    ``str``, :class:`Identifier` or nested :class:`TextMessage`.
    """

    __slots__ = ("fields", "line")

    def __init__(self, line: int = 1):
        self.fields: Dict[str, List[Any]] = {}
        #: the line the message starts on (1 for the top-level message)
        self.line = line

    def add(self, name: str, value: Any) -> None:
        self.fields.setdefault(name, []).append(value)

    def all(self, name: str) -> List[Any]:
        """Every value of field ``name`` (``[]`` when absent)."""
        return self.fields.get(name, [])

    def get(self, name: str, default: Any = None) -> Any:
        """The last value of field ``name`` (what protobuf keeps for a singular field),
        or ``default``."""
        values = self.fields.get(name)
        return values[-1] if values else default

    def has(self, name: str) -> bool:
        return name in self.fields

    def __repr__(self) -> str:
        return f"TextMessage({self.fields!r})"


_TOKEN = re.compile(r"""
    (?P<space>[ \t\r\f\v]+|\n)
  | (?P<comment>\#[^\n]*)
  | (?P<string>"(?:[^"\\\n]|\\.)*"|'(?:[^'\\\n]|\\.)*')
  | (?P<number>[-+]?(?:0[xX][0-9a-fA-F]+|(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?[fF]?)(?![\w.]))
  | (?P<signed_word>[-+][A-Za-z_]\w*)
  | (?P<word>[A-Za-z_][\w.]*)
  | (?P<punct>[{}<>\[\]:,;])
""", re.VERBOSE)

_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "\\": "\\", "'": "'", '"': '"', "a": "\a", "b": "\b",
            "f": "\f", "v": "\v", "?": "?"}


def _tokens(text: str) -> Iterator[Tuple[str, str, int, int]]:
    """(kind, text, line, column) of each token; spaces and comments skipped."""
    pos, line, line_start = 0, 1, 0
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None:
            raise TextFormatError(f"unexpected character {text[pos]!r}", line, pos - line_start + 1)
        kind = m.lastgroup
        if kind == "space":
            if m.group() == "\n":
                line += 1
                line_start = m.end()
        elif kind != "comment":
            yield kind, m.group(), line, pos - line_start + 1
        pos = m.end()


def _unescape(body: str, line: int, column: int) -> str:
    out = []
    i = 0
    while i < len(body):
        c = body[i]
        if c != "\\":
            out.append(c)
            i += 1
            continue
        nxt = body[i + 1]
        if nxt in _ESCAPES:
            out.append(_ESCAPES[nxt])
            i += 2
        elif nxt in "01234567":
            digits = re.match(r"[0-7]{1,3}", body[i + 1:]).group()
            out.append(chr(int(digits, 8)))
            i += 1 + len(digits)
        elif nxt in "xX":
            digits = re.match(r"[0-9a-fA-F]{1,2}", body[i + 2:])
            if digits is None:
                raise TextFormatError("\\x needs hexadecimal digits", line, column + i)
            out.append(chr(int(digits.group(), 16)))
            i += 2 + len(digits.group())
        else:
            raise TextFormatError(f"unknown escape \\{nxt}", line, column + i)
    # protobuf strings are bytes: octal/hex escapes give bytes of a UTF-8 sequence
    raw = "".join(out)
    try:
        return raw.encode("latin-1").decode("utf-8")
    except (UnicodeEncodeError, UnicodeDecodeError):
        return raw


def _number(text: str, line: int, column: int):
    body = text.lstrip("+")
    neg = body.startswith("-")
    digits = body[1:] if neg else body
    if digits[:2] in ("0x", "0X"):
        value = int(digits, 16)
    elif re.fullmatch(r"0[0-7]+", digits):
        value = int(digits, 8)
    elif re.fullmatch(r"\d+", digits):
        value = int(digits)
    else:
        try:
            value = float(digits.rstrip("fF"))
        except ValueError:
            raise TextFormatError(f"bad number {text!r}", line, column) from None
    return -value if neg else value


class _Parser:
    def __init__(self, text: str):
        self._tokens = list(_tokens(text))
        self._i = 0
        # where "unexpected end of text" points: just past the last character
        self._end = (text.count("\n") + 1, len(text) - (text.rfind("\n") + 1) + 1)

    def _peek(self) -> Optional[Tuple[str, str, int, int]]:
        return self._tokens[self._i] if self._i < len(self._tokens) else None

    def _next(self, expected: str) -> Tuple[str, str, int, int]:
        tok = self._peek()
        if tok is None:
            raise TextFormatError(f"unexpected end of text, expected {expected}", *self._end)
        self._i += 1
        return tok

    def message(self, close: Optional[str], line: int) -> TextMessage:
        msg = TextMessage(line)
        while True:
            tok = self._peek()
            if tok is None:
                if close is not None:
                    raise TextFormatError(f"unexpected end of text, expected {close!r} to close the message "
                                          f"opened on line {line}", *self._end)
                return msg
            kind, text, ln, col = tok
            if kind == "punct" and text == close:
                self._i += 1
                return msg
            if kind != "word":
                raise TextFormatError(f"expected a field name, got {text!r}", ln, col)
            self._i += 1
            self._field(msg, text)
            nxt = self._peek()
            if nxt is not None and nxt[0] == "punct" and nxt[1] in ",;":
                self._i += 1

    def _field(self, msg: TextMessage, name: str) -> None:
        kind, text, ln, col = self._next(f"':' or '{{' after {name!r}")
        colon = kind == "punct" and text == ":"
        if colon:
            kind, text, ln, col = self._next(f"a value for {name!r}")
        if kind == "punct" and text in "{<":
            msg.add(name, self.message("}" if text == "{" else ">", ln))
            return
        if not colon:
            raise TextFormatError(f"expected ':' or '{{' after field {name!r}, got {text!r}", ln, col)
        if kind == "punct" and text == "[":
            self._list(msg, name)
            return
        msg.add(name, self._scalar(kind, text, ln, col, name))

    def _list(self, msg: TextMessage, name: str) -> None:
        kind, text, ln, col = self._next(f"a value or ']' in the list of {name!r}")
        if kind == "punct" and text == "]":
            return
        while True:
            if kind == "punct" and text in "{<":
                msg.add(name, self.message("}" if text == "{" else ">", ln))
            else:
                msg.add(name, self._scalar(kind, text, ln, col, name))
            kind, text, ln, col = self._next(f"',' or ']' in the list of {name!r}")
            if kind == "punct" and text == "]":
                return
            if not (kind == "punct" and text == ","):
                raise TextFormatError(f"expected ',' or ']' in the list of {name!r}, got {text!r}", ln, col)
            kind, text, ln, col = self._next(f"a value in the list of {name!r}")

    def _scalar(self, kind: str, text: str, ln: int, col: int, name: str):
        if kind == "number":
            return _number(text, ln, col)
        if kind == "word":
            return Identifier(text)
        if kind == "signed_word":
            low = text[1:].lower()
            if low in ("inf", "infinity", "nan"):
                value = float(low)
                return -value if text[0] == "-" else value
            raise TextFormatError(f"bad value {text!r} for {name!r}", ln, col)
        if kind == "string":
            parts = [_unescape(text[1:-1], ln, col)]
            while True:
                nxt = self._peek()
                if nxt is None or nxt[0] != "string":
                    return "".join(parts)
                self._i += 1
                parts.append(_unescape(nxt[1][1:-1], nxt[2], nxt[3]))
        raise TextFormatError(f"expected a value for {name!r}, got {text!r}", ln, col)


def parse_text(text: str) -> TextMessage:
    """Parse protobuf text format into a :class:`TextMessage` tree (schema-less).

    Raises:
        TextFormatError: a syntax error (with its line and column).
    """
    return _Parser(text).message(None, 1)
