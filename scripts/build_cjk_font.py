"""Rebuild the CJK font the helpers ship for Chinese plots: a subset of Noto Sans CJK SC.

    apt-get install fonts-noto-cjk      # Debian's package of Google's Noto CJK fonts (SIL OFL 1.1)
    python scripts/build_cjk_font.py    # writes src/helpers/data/fonts/

The subset holds every GB 2312 character (the 6,763 common hanzi and its symbols), CJK and
full-width punctuation, ASCII, and every character the translation catalogues (i18n/*/*.json:
the chapters' and the helpers' own messages and printed lines) use. Run it again when
tests/test_i18n.py says a character is missing from the shipped font. The family is renamed
(``CJK_FONT_FAMILY``, without the Noto trademark), so the shipped file never mixes with a full
Noto CJK installed on the system; the SIL Open Font License allows modified versions and
travels with the file.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from helpers.i18n import CJK_FONT_FAMILY, CJK_FONT_FILE  # noqa: E402

SOURCE = Path("/usr/share/fonts/opentype/noto/NotoSansCJK-Regular.ttc")
COPYRIGHT = Path("/usr/share/doc/fonts-noto-cjk/copyright")
FACE = "Noto Sans CJK SC"
OUT = ROOT / "src" / "helpers" / "data" / "fonts"


def gb2312() -> set[str]:
    """Every character of GB 2312 (rows 1-9 symbols, levels 1 and 2 hanzi)."""
    chars = set()
    for high in range(0xA1, 0xF8):
        for low in range(0xA1, 0xFF):
            try:
                chars.add(bytes([high, low]).decode("gb2312"))
            except UnicodeDecodeError:
                pass
    return chars


def used_characters(root: Path = ROOT) -> set[str]:
    """Characters of the catalogues (the helpers' messages and lines are ``i18n/*/helpers.json``)."""
    texts = [
        json.dumps(json.loads(p.read_text(encoding="utf-8")), ensure_ascii=False)
        for p in sorted((root / "i18n").glob("*/*.json"))
    ]
    return {c for t in texts for c in t if c.isprintable()}


def wanted() -> set[str]:
    blocks = [range(0x20, 0x7F), range(0x3000, 0x3040), range(0xFF00, 0xFFF0)]
    return gb2312() | used_characters() | {chr(c) for block in blocks for c in block}


def ofl_text() -> str:
    """The SIL OFL 1.1 text as Debian ships it with the fonts (its copyright file, unfolded)."""
    lines = COPYRIGHT.read_text(encoding="utf-8").splitlines()
    start = max(i for i, line in enumerate(lines) if line == "License: SIL-1.1") + 1  # the text stanza
    body = []
    for line in lines[start:]:
        if line and not line.startswith(" "):
            break
        body.append("" if line.strip() == "." else line[1:])
    return "\n".join(body).strip() + "\n"


def build(source: Path = SOURCE) -> Path:
    from fontTools import subset
    from fontTools.ttLib import TTCollection

    faces = TTCollection(str(source)).fonts
    font = next((f for f in faces if f["name"].getDebugName(1) == FACE), None)
    if font is None:
        raise SystemExit(f"{source} has no face named {FACE!r}: is it Debian's fonts-noto-cjk?")
    version = font["name"].getDebugName(5)
    notice = font["name"].getDebugName(0)
    options = subset.Options()
    options.hinting = False  # matplotlib renders unhinted; saves a third of the size
    options.name_IDs = ["*"]
    subsetter = subset.Subsetter(options)
    cmap = font.getBestCmap()
    chars = sorted(c for c in wanted() if ord(c) in cmap)
    subsetter.populate(unicodes=[ord(c) for c in chars])
    subsetter.subset(font)
    names = font["name"]
    postscript = CJK_FONT_FAMILY.replace(" ", "") + "-Regular"
    for record in list(names.names):
        if record.nameID in (1, 16):
            names.setName(CJK_FONT_FAMILY, record.nameID, record.platformID, record.platEncID, record.langID)
        elif record.nameID in (3, 4):
            names.setName(
                f"{CJK_FONT_FAMILY} Regular",
                record.nameID,
                record.platformID,
                record.platEncID,
                record.langID,
            )
        elif record.nameID == 6:
            names.setName(postscript, 6, record.platformID, record.platEncID, record.langID)
    if "CFF " in font:
        cff = font["CFF "].cff
        cff.fontNames = [postscript]
        top = cff.topDictIndex[0]
        top.FamilyName, top.FullName = CJK_FONT_FAMILY, f"{CJK_FONT_FAMILY} Regular"
    OUT.mkdir(parents=True, exist_ok=True)
    target = OUT / CJK_FONT_FILE
    font.recalcTimestamp = False  # the same input gives the same file
    font.save(str(target))
    (OUT / "OFL.txt").write_text(f"{notice}\n\n{ofl_text()}", encoding="utf-8")
    (OUT / "README.md").write_text(
        f"# {CJK_FONT_FILE}\n\n"
        f"A subset of **{FACE}** ({version}) from Debian's `fonts-noto-cjk` package "
        f"(`{source}`), made by `scripts/build_cjk_font.py` with fontTools: {len(chars):,} "
        "characters (GB 2312, CJK and full-width punctuation, ASCII, and every character of the "
        "course's translation catalogues and Chinese messages), hints removed, the family renamed "
        f'to "{CJK_FONT_FAMILY}" (a modified version under the OFL; Noto is a trademark of '
        "Google, so the name leaves it out).\n\n"
        "Licence: SIL Open Font License 1.1, in `OFL.txt` beside this file (the font and this "
        "subset only; the course's code is under its own licence). Upstream: Google's Noto CJK "
        "fonts (googlefonts/noto-cjk), derived from Adobe's Source Han Sans.\n\n"
        "`helpers.i18n.use_fonts()` adds it to matplotlib as the fallback family after the usual "
        "one, so Latin text keeps its font and Chinese text gets this one.\n",
        encoding="utf-8",
    )
    print(f"wrote {target} ({target.stat().st_size / 1e6:.2f} MB, {len(chars):,} characters)")
    return target


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--source", type=Path, default=SOURCE, help=f"Noto Sans CJK collection ({SOURCE})")
    args = parser.parse_args()
    if not args.source.is_file():
        raise SystemExit(
            f"{args.source} not found: apt-get install fonts-noto-cjk (Debian), or pass "
            "--source with a NotoSansCJK-Regular.ttc"
        )
    build(args.source)


if __name__ == "__main__":
    main()
