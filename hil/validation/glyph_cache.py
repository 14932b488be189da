"""An Agg canvas that draws text from cached glyph bitmaps: the same pixels as matplotlib's, for less of the CPU.

`mms validate` draws one figure per channel (64 in a 10-minute run of 64 channels), each with about forty tick
labels and titles. matplotlib's Agg renderer lays each string out (FreeType and HarfBuzz) and rasterises each of its
glyphs again at every draw: over half of a figure's text time, while the same strings ("0.2", "time (s)") and
glyphs come back in every figure. This renderer keeps both:

- the layout of a string (its glyphs and their offsets from the pen, in pixels): a function of the string, the font
  file, size, resolution, features and language only;
- the bitmap of a glyph, per font, size, resolution, glyph, rotation and the pen's *fraction of a pixel* (FreeType
  places glyphs in 1/64 pixel): a glyph whose pen lies a whole number of pixels further is the same bitmap moved by
  that many pixels, since FreeType moves the outline by a whole number of its 1/64-pixel units before it rasterises
  it, and the rasteriser's grid moves with it.

So every glyph is blended onto the canvas with the bitmap and the position matplotlib's
``RendererAgg._draw_text_glyphs_and_boxes`` gives it (tests/hil_record/test_validate_figures.py compares the PNGs
pixel for pixel). It relies on that private method's arithmetic (matplotlib 3.11: ``FT2Font._layout``,
``_set_transform``, ``_render_glyph``); with a matplotlib without them, the canvas draws text as matplotlib does.
Mathtext (``$...$``) and TeX go matplotlib's way.
"""
from __future__ import annotations

import math

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg, RendererAgg, get_hinting_flag
from matplotlib.font_manager import get_font

try:
    from matplotlib.ft2font import FT2Font, RenderMode
    PRIVATE_TEXT_API = all(hasattr(FT2Font, name) for name in ("_layout", "_set_transform", "_render_glyph"))
except ImportError:   # an older matplotlib: no glyph-level text drawing to cache
    PRIVATE_TEXT_API = False

#: FreeType's 26.6 fixed point: 64 units per pixel
SUBPIXELS = 64
#: its 16.16 fixed point for the glyph transform's matrix
MATRIX_ONE = 0x10000
class GlyphCachingRenderer(RendererAgg):
    """RendererAgg whose plain-text drawing reuses string layouts and glyph bitmaps (module docstring)."""

    def __init__(self, width: int, height: int, dpi: float):
        super().__init__(width, height, dpi)
        #: (font file, size pt, dpi, string, features, language) -> [(its glyph's font file, glyph index, x px, y px)]
        self._layouts: dict[tuple, list[tuple]] = {}
        #: (font file, size pt, dpi, glyph index, angle deg, x % 64, y % 64, antialiased, hinting)
        #: -> (bitmap (rows, columns) uint8, left px, top px) for the pen at that fraction of a pixel
        self._glyphs: dict[tuple, tuple[np.ndarray, int, int]] = {}

    def draw_text(self, gc, x, y, s, prop, angle, ismath=False, mtext=None):
        if ismath or not PRIVATE_TEXT_API:
            return super().draw_text(gc, x, y, s, prop, angle, ismath, mtext)
        font = self._prepare_font(prop)
        size = prop.get_size_in_points()
        flags = get_hinting_flag()
        features = mtext.get_fontfeatures() if mtext is not None else None
        language = mtext.get_language() if mtext is not None else None
        key = (font.fname, size, self.dpi, s, tuple(features) if features is not None else None, language)
        items = self._layouts.get(key)
        if items is None:
            items = [(item.ft_object.fname, item.glyph_index, item.x, item.y)
                     for item in font._layout(s, flags=flags, features=features, language=language)]
            self._layouts[key] = items
        for bitmap, left, top in self._glyph_bitmaps(x, y, angle, size, flags, items, gc.get_antialiased()):
            self._renderer.draw_text_image(bitmap, left, int(self.height) - top + bitmap.shape[0], 0, gc)

    def _glyph_bitmaps(self, x: float, y: float, angle: float, size: float, flags, items: list[tuple],
                       antialiased: bool) -> list[tuple[np.ndarray, int, int]]:
        """The bitmap, left and top pixel of each glyph of a string, where matplotlib's
        ``_draw_text_glyphs_and_boxes`` puts them (plain text: no boxes)."""
        cos, sin = math.cos(math.radians(angle)), math.sin(math.radians(angle))
        height = self.height   # y is downwards here, upwards in FreeType
        out = []
        for font_file, glyph_index, dx, dy in items:
            pen_x = round(SUBPIXELS * (x + dx * cos - dy * sin))
            pen_y = round(SUBPIXELS * (height - y + dx * sin + dy * cos))
            key = (font_file, size, self.dpi, glyph_index, angle, pen_x % SUBPIXELS, pen_y % SUBPIXELS,
                   antialiased, flags)
            glyph = self._glyphs.get(key)
            if glyph is None:
                glyph = self._render(font_file, size, glyph_index, cos, sin, pen_x % SUBPIXELS,
                                     pen_y % SUBPIXELS, antialiased, flags)
                self._glyphs[key] = glyph
            bitmap, left, top = glyph
            out.append((bitmap, left + pen_x // SUBPIXELS, top + pen_y // SUBPIXELS))
        return out

    def _render(self, font_file: str, size: float, glyph_index: int, cos: float, sin: float, pen_x: int, pen_y: int,
                antialiased: bool, flags) -> tuple[np.ndarray, int, int]:
        """The bitmap of a glyph with its pen at (pen_x, pen_y) in 1/64 pixel (both 0-63), and its left and top
        pixel (the slant and extension of synthetic fonts, which plain text does not use, are 0 and 1)."""
        # the font by its file, from matplotlib's cache, which a forked child empties: not one kept from the parent. A
        # font keeps its file open and forked processes share an open file's offset, so two workers loading glyphs
        # through one font read at each other's positions (two forked processes rendering 5 460 strings each through
        # a font opened before the fork: about 250 FreeType errors, "invalid outline", and 45 wrong bitmaps each)
        ft_object = get_font(font_file)
        ft_object.set_size(size, self.dpi)
        matrix = (MATRIX_ONE * np.array([[cos, -sin], [sin, cos]])).round().astype(int)
        ft_object._set_transform(matrix, [pen_x, pen_y])
        rendered = ft_object._render_glyph(glyph_index, flags, RenderMode.NORMAL if antialiased else RenderMode.MONO)
        bitmap = np.array(rendered.buffer, dtype=np.uint8)   # a copy: the font's buffer is reused by the next glyph
        if not antialiased:
            bitmap *= 0xff
        return bitmap, rendered.left, rendered.top


class GlyphCachingCanvas(FigureCanvasAgg):
    """FigureCanvasAgg drawing with one :class:`GlyphCachingRenderer` while the figure keeps its size and dpi, so its
    caches and matplotlib's text extents (kept per renderer) serve every figure drawn on it."""

    def get_renderer(self):
        width, height = self.get_width_height(physical=True)
        key = width, height, self.figure.dpi
        if self._lastKey != key:
            self.renderer = GlyphCachingRenderer(width, height, self.figure.dpi)
            self._lastKey = key
        return self.renderer
