"""The report's HTML in a real browser: headless Chromium decodes every figure and draws them.

Chromium comes from Debian (scripts/install-chromium.sh); without it these tests are skipped, saying so.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image

from cudanalyst.report import build_report
from cudanalyst.report.demo import demo_spec, write_demo_run
from cudanalyst.store import open_store

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (run scripts/install-chromium.sh)")

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]

# Appended to a copy of the page (the report itself has no scripts): once loaded, it writes what each
# image decoded to into the DOM, which --dump-dom then prints.
PROBE = """<script>
window.addEventListener("load", () => {
  const out = document.createElement("pre");
  out.id = "probe";
  out.textContent = [...document.images].map(i => `${i.dataset.file}:${i.complete}:${i.naturalWidth}x${i.naturalHeight}`)
    .join("\\n");
  document.body.appendChild(out);
});
</script>"""


def chromium(profile: Path, *args: str) -> subprocess.CompletedProcess[str]:
    assert CHROMIUM is not None
    return subprocess.run([CHROMIUM, *FLAGS, f"--user-data-dir={profile}", *args], capture_output=True, text=True,
                          timeout=120, check=False)


def screenshot(tmp: Path, page: Path, name: str) -> np.ndarray:
    shot = tmp / f"{name}.png"
    proc = chromium(tmp / f"profile-{name}", f"--screenshot={shot}", "--window-size=1400,3000", page.as_uri())
    assert shot.is_file(), f"no screenshot of {page}: {proc.stderr[-2000:]}"
    return np.asarray(Image.open(shot).convert("RGB")).astype(np.int16)


def colored_pixels(img: np.ndarray) -> int:
    """Pixels with a clear hue: figures have them; text, borders and a broken-image icon do not."""
    return int(((img.max(axis=2) - img.min(axis=2)) > 80).sum())


@pytest.fixture(scope="module")
def report_page(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    root = tmp_path_factory.mktemp("runs")
    store = open_store(str(root)).child("demo/")
    write_demo_run(store, demo_spec(output_uri=str(root)), gpu=True)
    report = build_report(store)
    return root / "demo" / "report" / "report.html", report


def test_every_figure_decodes_in_chromium(report_page: tuple[Path, dict[str, Any]], tmp_path: Path) -> None:
    page, report = report_page
    probed = tmp_path / "probed.html"
    probed.write_text(page.read_text().replace("</body>", PROBE + "</body>"))
    proc = chromium(tmp_path / "profile", "--virtual-time-budget=10000", "--dump-dom", probed.as_uri())
    assert 'id="probe"' in proc.stdout, proc.stderr[-2000:]
    probe = proc.stdout.split('id="probe">', 1)[1].split("</pre>", 1)[0].strip().splitlines()
    seen = {}
    for line in probe:
        name, complete, size = line.split(":")
        width, height = map(int, size.split("x"))
        assert complete == "true"
        seen[name] = (width, height)
    assert set(seen) == set(report["figures"])
    for name, (width, height) in seen.items():
        png = Image.open(page.parent / name)
        assert (width, height) == png.size, name  # decoded at the size the PNG file has
        assert width > 300 and height > 150


def test_screenshot_shows_the_figures(report_page: tuple[Path, dict[str, Any]], tmp_path: Path) -> None:
    page, _ = report_page
    blank = tmp_path / "blank.html"
    blank.write_text("<!DOCTYPE html><html><body></body></html>")
    # The same page with its images' data removed: text and tables, no figures.
    stripped = tmp_path / "stripped.html"
    html = page.read_text()
    parts = html.split('src="data:image/png;base64,')
    stripped.write_text(parts[0] + "".join('src="' + p.split('"', 1)[1] for p in parts[1:]))

    full = screenshot(tmp_path, page, "report")
    empty = screenshot(tmp_path, blank, "blank")
    no_figures = screenshot(tmp_path, stripped, "stripped")

    assert np.abs(full - empty).sum() > 0  # the page drew something at all
    assert colored_pixels(empty) == 0
    # Figures bring colour (lines, bands, bars, heatmaps); the tables and text alone hardly any.
    assert colored_pixels(full) > 50_000
    assert colored_pixels(full) > 20 * max(colored_pixels(no_figures), 1)
