"""Reading text as a reader does, for the reviews that read what an author wrote (the leak review,
the addressed-text review, the request's scope).

- :func:`fold`: the text as a reader sees it: entities, compatibility forms (fullwidth,
  mathematical digits), accents, invisible characters (zero-width spaces, soft hyphens), Cyrillic
  and Greek letters that look Latin, dash look-alikes, other scripts' digits, ``O``/``l`` among
  digits, camel case, all folded;
- :data:`DECODERS` and :data:`TRANSFORMS`: the encodings a language model decodes without tools
  (base64, hex, percent-encoding, ``\\uXXXX``/``\\xXX`` escapes, HTML entities) decoded in place, and
  what it undoes over a whole line (rot13, reversed text, reversed words, reversed word order);
  :func:`maybe_encoded` says quickly whether any span of a text may decode.
"""

from __future__ import annotations

import base64
import binascii
import html
import re
import string
import unicodedata
import urllib.parse
from collections.abc import Callable

#: the quick look takes base64 for a text from this many characters (four bytes: a short code
#: such as ``SG04`` decodes to three printable ones); beside an id, three bytes ("P-1") are read
QUICK_BASE64 = 6

CAMEL = re.compile(r"(?<=[a-z])(?=[A-Z])")

#: digit-group separators a reader skips inside a number (no-break and thin spaces)
_GROUP_SPACE = re.compile(r"(?<=\d)[\u00a0\u2007\u2009\u202f](?=\d)")
#: ``O``, ``l`` and ``I`` among digits read as 0 and 1 (after case folding)
_DIGITISH = re.compile(r"(?<![^\W\d_])[0-9oli]*\d[0-9oli]*(?![^\W\d_])")

#: letters of other scripts that read as Latin ones, and Latin letters NFKD leaves alone
_LOOKALIKES = str.maketrans({
    **dict(zip("АВЕЅІЈКМНОРСТХУаеіјоԁрсѕхуһԛԝвкмнтьӏ", "ABESIJKMHOPCTXYaeijodpcsxyhqwbkmhtbl", strict=True)),
    **dict(zip("ΑΒΕΖΗΙΚΜΝΟΡΤΥΧαβεικνορτυχϲϳ", "ABEZHIKMNOPTYXabeikvoptuxcj", strict=True)),
    **dict(zip("ıłøđħŀſƖǀ", "ilodhlsll", strict=True)),
})

#: invisible characters NFKD keeps that are not format characters
_INVISIBLE = frozenset("\u115f\u1160\u3164\uffa0\u2800\u180e")


#: a run that may be base64: base64's letters with a digit beside a letter or a lower-case letter
#: before a capital in it (an ordinary word, number, code or path has neither; base64 of a few
#: characters of text has); the lazy start keeps the scan linear on a hostile run
_BASE64_RUN = re.compile(
    r"(?<![A-Za-z0-9+/_=-])[A-Za-z0-9+/_-]*?(?:[0-9][A-Za-z]|[A-Za-z][0-9]|[a-z][A-Z])[A-Za-z0-9+/_=-]*")
#: each byte of a text as its class: ``a`` lower case, ``A`` capital, ``0`` digit, ``+`` base64's
#: other letters, a space for any other; a run that may be base64 has one of the pairs
CHARACTER_CLASSES = bytes.maketrans(bytes(range(256)), bytes(
    ord("a") if chr(c).islower() else ord("A") if chr(c).isupper() else ord("0") if chr(c).isdigit()
    else ord("+") if chr(c) in "+/_=-" else ord(" ") for c in range(128)) + b" " * 128)
_MIXED_PAIRS = (b"0a", b"a0", b"0A", b"A0", b"aA")
#: a piece of a base64 run between what it may be cut at, where the whole does not decode
#: (``RFD-YXBwcm92ZWQ``, ``notes/YXBwcm92ZWQ=``)
_BASE64_PIECE = re.compile(r"[A-Za-z0-9+=]+")
#: three or more bytes in hex, written together or apart (``617070``, ``61 70 70``, ``0x61,0x70``)
_HEX_RUN = re.compile(r"(?<![0-9A-Za-z])(?:(?:0x|\\x)?[0-9A-Fa-f]{2}[ :,-]?){3,}(?![0-9A-Za-z])")
_HEX_NOISE = re.compile(r"0x|\\x|[ :,-]")
_PERCENT = re.compile(r"%[0-9A-Fa-f]{2}")
_ESCAPE = re.compile(r"\\(?:u\{([0-9A-Fa-f]{1,6})\}|u([0-9A-Fa-f]{4})|U([0-9A-Fa-f]{8})|x([0-9A-Fa-f]{2}))")
#: what decoded bytes must not hold to be read as text: control characters but tab and breaks
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0e-\x1f\x7f-\x9f]")
#: what a short decoded text (:data:`SHORT_TEXT` characters) holds but letters and digits (plain
#: punctuation and other encodings' marks), or it is noise; bytes that happen to be a longer one
#: are rare
_PLAIN_MARKS = frozenset(" .,:;'\"!?()/_-&#%\\+=")
SHORT_TEXT = 8
_ROT13 = str.maketrans(string.ascii_lowercase + string.ascii_uppercase,
                       string.ascii_lowercase[13:] + string.ascii_lowercase[:13]
                       + string.ascii_uppercase[13:] + string.ascii_uppercase[:13])
_ROT13_BYTES = bytes.maketrans((string.ascii_lowercase + string.ascii_uppercase).encode(),
                               (string.ascii_lowercase[13:] + string.ascii_lowercase[:13]
                                + string.ascii_uppercase[13:] + string.ascii_uppercase[:13]).encode())
_NON_SPACE = re.compile(r"\S+")


def _as_text(data: bytes) -> str | None:
    """Decoded bytes as a reader would take them: UTF-8 text without control characters with a
    letter or a digit (a short one: nothing but those, spaces and plain marks); None where they are
    not, what an ordinary word or code "decodes" to (``SG04`` to "Hm8" passes: the quick look asks
    for more)."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return None
    if len(text) < 2 or _CONTROL.search(text):
        return None
    if not any(c.isalnum() for c in text):
        return None
    short = len(text) <= SHORT_TEXT
    return text if not short or all(c.isalnum() or c.isspace() or c in _PLAIN_MARKS for c in text) else None


def _from_base64(run: str, least: int = 4) -> str | None:
    """A base64 run decoded as text, from ``least`` characters of base64 (three bytes)."""
    body = run.rstrip("=")
    if len(body) < least or len(body) % 4 == 1:
        return None
    urlsafe = "-" in body or "_" in body
    if urlsafe and ("+" in body or "/" in body):
        return None
    try:
        data = base64.b64decode(body + "=" * (-len(body) % 4), altchars=b"-_" if urlsafe else None,
                                validate=True)
    except (binascii.Error, ValueError):
        return None
    return _as_text(data)


def _from_hex(run: str) -> str | None:
    digits = _HEX_NOISE.sub("", run)
    if len(digits) < 6 or len(digits) % 2 or digits.strip(string.hexdigits):
        return None
    return _as_text(bytes.fromhex(digits))


def _base64_swap(match: re.Match) -> str:
    """A base64 run decoded, or where the whole does not decode, each piece of it that does."""
    run = match.group()
    whole = _from_base64(run)
    if whole is not None:
        return whole
    return _BASE64_PIECE.sub(lambda m: _from_base64(m.group()) or m.group(), run)


def _substituted(pattern: re.Pattern, swap: Callable[[re.Match], str], text: str) -> str | None:
    decoded = pattern.sub(swap, text)
    return decoded if decoded != text else None


def _decode_base64(text: str) -> str | None:
    return _substituted(_BASE64_RUN, _base64_swap, text)


def _decode_hex(text: str) -> str | None:
    return _substituted(_HEX_RUN, lambda m: _from_hex(m.group()) or m.group(), text)


def _decode_percent(text: str) -> str | None:
    return urllib.parse.unquote(text) if _PERCENT.search(text) else None


def _decode_escapes(text: str) -> str | None:
    def swap(match: re.Match) -> str:
        point = int(next(g for g in match.groups() if g), 16)
        return chr(point) if point <= 0x10FFFF and not 0xD800 <= point <= 0xDFFF else match.group()
    return _substituted(_ESCAPE, swap, text)


def rot13(text: str) -> str:
    return text.encode().translate(_ROT13_BYTES).decode() if text.isascii() else text.translate(_ROT13)


def _each_word_reversed(text: str) -> str:
    return _NON_SPACE.sub(lambda m: m.group()[::-1], text)


def _decode_entities(text: str) -> str | None:
    """HTML entities (folding reads them too, but not where another encoding wraps them)."""
    return html.unescape(text) if "&" in text and html.unescape(text) != text else None


#: what decodes spans of a line in place, by name
DECODERS: dict[str, Callable[[str], str | None]] = {
    "base64": _decode_base64, "hex": _decode_hex, "percent-encoding": _decode_percent,
    "escapes": _decode_escapes, "entities": _decode_entities}
#: what a reader undoes over a whole line, by name, and what it makes of one word; rot13 and a
#: reversal together are one reading (no more readings come of them)
TRANSFORMS: dict[str, tuple[Callable[[str], str], Callable[[str], str] | None]] = {
    "rot13": (rot13, rot13),
    "reversed": (lambda t: t[::-1], lambda w: w[::-1]),
    "each word reversed": (_each_word_reversed, lambda w: w[::-1]),
    "rot13 reversed": (lambda t: rot13(t[::-1]), lambda w: rot13(w[::-1])),
    "rot13 each word reversed": (lambda t: rot13(_each_word_reversed(t)), lambda w: rot13(w[::-1])),
    "word order reversed": (lambda t: " ".join(t.split()[::-1]), None),
}



def maybe_encoded(text: str) -> bool:
    """Whether some span of the text may decode: a percent-encoded byte, an escape or an entity
    (as written, reversed or rot13'd), or a base64 or hex run that decodes to text as written,
    reversed or rot13'd. A run is tried where it has a digit beside a letter or a capital after a
    lower-case letter (:data:`_MIXED_PAIRS` of the text's :data:`CHARACTER_CLASSES`: each run is looked at
    once, however long), a hex run where there are runs of digits or pairs apart."""
    if "%" in text and any(_PERCENT.search(form) for form in (text, text[::-1], rot13(text))):
        return True
    if "\\" in text and any(_ESCAPE.search(form) for form in (text, text[::-1], rot13(text))):
        return True
    if "&" in text and ("&#" in text or "#&" in text or html.unescape(text) != text):
        return True
    raw = text.encode()
    classes = raw.translate(CHARACTER_CLASSES)
    runs = set()
    for pair in _MIXED_PAIRS:
        at = classes.find(pair)
        while at >= 0:
            end = classes.find(b" ", at)
            end = len(classes) if end < 0 else end
            runs.add(raw[classes.rfind(b" ", 0, at) + 1:end].decode())
            at = classes.find(pair, end)
    for run in runs:
        forms = (run, run[::-1], rot13(run), rot13(run[::-1]))
        if any(_from_base64(form, QUICK_BASE64) or _from_hex(form) for form in forms) or any(
                _from_base64(piece, QUICK_BASE64) for piece in _BASE64_PIECE.findall(run)):
            return True
    hexish = (b"000000" in classes or b"00 00 00" in classes or "0x" in text
              or any(len(run) == 2 for run in runs))
    return hexish and any(_from_hex(form) for m in _HEX_RUN.finditer(text)
                          for form in (m.group(), m.group()[::-1]))





def fold_keeping_case(text: str, camel: bool = True) -> str:
    """The text as a reader sees it, but for letter case: entities, compatibility forms, accents,
    invisible characters, look-alike letters, dashes and other scripts' digits folded, camel case
    split (unless not ``camel``: a name in random case, "oSeI", is one word)."""
    if "&" in text:
        text = html.unescape(text)
    if not text.isascii():
        text = unicodedata.normalize("NFKD", _GROUP_SPACE.sub("'", text)).translate(_LOOKALIKES)
        text = "".join(_fold_char(c) for c in text)
    return CAMEL.sub(" ", text) if camel else text


def fold(text: str) -> str:
    """The text as a reader takes it (:func:`fold_keeping_case`, case folded, ``O``/``l``/``I``
    among digits read as digits)."""
    return _DIGITISH.sub(_as_digits, fold_keeping_case(text).casefold())


def _fold_char(c: str) -> str:
    if c.isascii():
        return c
    category = unicodedata.category(c)
    if category in ("Mn", "Me", "Cf") or c in _INVISIBLE:
        return ""
    if category == "Nd":
        return str(unicodedata.digit(c))
    if category == "Pd" or c in "\u2212\u2043\u02d7\u2796":
        return "-"
    if category == "Zs":
        return " "
    return c


def _as_digits(match: re.Match) -> str:
    return match.group().replace("o", "0").replace("l", "1").replace("i", "1")
