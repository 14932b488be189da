"""`mms validate`'s figures: text drawn from cached glyph bitmaps (hil/validation/glyph_cache.py) gives the pixels
matplotlib's own Agg renderer gives."""
from __future__ import annotations

import json
import os

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from hil.validation import glyph_cache, validate

#: strings of a figure's text: tick labels (the unicode minus), labels with units, a title with a dash, digits again
STRINGS = ("0.2", "\u22120.4", "1e\u22125", "time (s)", "phase (deg of the cycle)", "joint_07 vs q[joint_07]: PASS \u2014",
           "0.20", "12.5 N m", "RMS error per cycle")


def _text_figure(shift_px: float) -> Figure:
    """Strings at sizes 7-12 pt, rotations 0, 90 and 30 deg, their anchors ``shift_px`` (a fraction) off the pixels."""
    figure = Figure(figsize=(6.0, 3.0), dpi=80)
    width, height = 6.0 * 80, 3.0 * 80
    for k, text in enumerate(STRINGS):
        x = (20 + 47.3 * k + shift_px) / width
        y = (30 + 19.7 * k + shift_px) / height
        figure.text(x, y, text, fontsize=7 + k % 6, rotation=(0, 90, 30)[k % 3])
    return figure


def _pixels(figure: Figure, canvas_class) -> np.ndarray:
    canvas = canvas_class(figure)
    canvas.draw()
    return np.asarray(canvas.buffer_rgba()).copy()


def test_cached_glyphs_draw_the_pixels_matplotlib_draws():
    assert glyph_cache.PRIVATE_TEXT_API   # with the project's matplotlib the cache is in use, not the fallback
    for shift in (0.0, 0.37, 0.5, 0.81):   # anchors at several fractions of a pixel: other glyph bitmaps
        figure = _text_figure(shift)
        expected = _pixels(figure, FigureCanvasAgg)
        canvas = glyph_cache.GlyphCachingCanvas(figure)
        canvas.draw()
        first = np.asarray(canvas.buffer_rgba()).copy()
        glyphs = len(canvas.renderer._glyphs)
        canvas.draw()   # the second time every glyph comes from the cache
        assert len(canvas.renderer._glyphs) == glyphs > len(STRINGS)
        assert np.array_equal(first, expected), f"shift {shift}: {np.count_nonzero((first != expected).any(-1))} px"
        assert np.array_equal(np.asarray(canvas.buffer_rgba()), expected)


def test_a_forked_child_renders_glyphs_with_fonts_of_its_own(monkeypatch):
    """Glyphs missing from the cache are rendered, in a forked worker, through the font matplotlib's cache gives that
    worker (emptied at the fork), not one kept from the parent: a font keeps its file open and forked processes share
    the file's offset (two forked processes rendering 5 460 strings each through a font opened before the fork got
    about 250 FreeType errors and 45 wrong bitmaps each)."""
    canvas = glyph_cache.GlyphCachingCanvas(_text_figure(0.0))
    rendering = []   # the fonts asked for to render glyphs (kept alive: no address is reused in the child)
    real_get_font = glyph_cache.get_font
    monkeypatch.setattr(glyph_cache, "get_font", lambda path: rendering.append(real_get_font(path)) or rendering[-1])
    canvas.draw()
    parent = {id(font) for font in rendering}
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:   # the child: anchors at new fractions of a pixel, so its glyphs are rendered, not cached
        try:
            start = len(rendering)
            for k, text in enumerate(canvas.figure.texts):
                text.set_position((0.013 * k + 0.4137, 0.5213))
            canvas.draw()
            os.write(write, json.dumps([id(font) for font in rendering[start:]]).encode())
        finally:
            os._exit(0)
    os.close(write)
    child = set(json.loads(os.read(read, 1 << 16)))
    os.waitpid(pid, 0)
    assert parent and child and not parent & child


def test_a_channels_figure_is_the_one_matplotlib_draws(tmp_path, kit):
    """The figures of a run, drawn one after another on one cached canvas, equal each drawn alone by matplotlib."""
    run = tmp_path / "run.mcap"
    kit.write_synthetic_run(run, duration_s=6.0)
    results, _document = validate.validate_run(run, tmp_path / "out", validate.load_settings(None), None, "all",
                                               progress=False)
    assert len(results) == 3
    for result in results:
        stock = validate.PairFigure()
        FigureCanvasAgg(stock.figure)   # matplotlib's own canvas and renderer, glyphs rasterised at every draw
        stock.save(result, tmp_path / "stock.png")
        assert (tmp_path / "stock.png").read_bytes() == (tmp_path / "out" / result.figure).read_bytes(), result.figure
