"""Figures for a paper: `--format png,pdf,svg` writes each figure in each format, the PNG at
`--dpi`; a format outside them is refused in one line, exit 2."""

import struct
from pathlib import Path

import pytest

from harness.report.sweep_report import report
from tests.harness.report.load_curves import accuracies, curve_record
from tests.harness.synthetic import write_sweep

HEADERS = {".png": b"\x89PNG", ".pdf": b"%PDF", ".svg": b"<svg"}


def png_dpi(path: Path) -> tuple[float, float]:
    """The PNG's resolution from its pHYs chunk (pixels per metre), in dots per inch."""
    data = path.read_bytes()
    at = data.index(b"pHYs") + 4
    x, y = struct.unpack(">II", data[at : at + 8])
    return x * 0.0254, y * 0.0254


def sweep(folder: Path) -> Path:
    records = [curve_record("linear", d, 0, accuracies(d / 8)) for d in (32, 64)]
    return write_sweep(folder, records + [curve_record("softmax", 64, 0, accuracies(100.0))])


def test_each_figure_is_written_in_each_format_with_its_header(tmp_path: Path) -> None:
    out = tmp_path / "out"
    report(sweep(tmp_path / "sweep"), out, "disabled", formats=("png", "pdf", "svg"), dpi=60)
    for stem in ("acc_vs_load", "capacity_vs_state"):
        for suffix, header in HEADERS.items():
            head = (out / f"{stem}{suffix}").read_bytes()[:400]
            assert head.startswith(header) or header in head, (stem, suffix)
        assert png_dpi(out / f"{stem}.png") == pytest.approx((60, 60), abs=0.5)
    curves = sorted(p.name for p in (out / "curves").iterdir())
    assert curves == [f"assoc_recall_{m}.{s}" for m in ("linear_d_model=32", "linear_d_model=64",
                      "softmax_d_model=64") for s in ("pdf", "png", "svg")]  # fmt: skip


def test_without_png_the_page_still_shows_each_figure(tmp_path: Path) -> None:
    out = tmp_path / "out"
    report(sweep(tmp_path / "sweep"), out, "disabled", formats=("svg",), dpi=40)
    assert not list(out.glob("*.png")) and (out / "acc_vs_load.svg").exists()
    page = (out / "report.html").read_text()
    assert page.count("data:image/png;base64,") >= 2 + 3  # two figures, three cells' curves


@pytest.mark.parametrize(
    ("flag", "value", "allowed"),
    [("--format", "png,jpg", "allowed png, pdf, svg"), ("--dpi", "5", "must be in [20, 1200]")],
)
def test_a_bad_format_or_dpi_is_refused_in_one_line(
    tmp_path: Path, monkeypatch, capsys, flag: str, value: str, allowed: str
) -> None:
    from harness.report.__main__ import main

    monkeypatch.setattr("sys.argv", ["report", str(tmp_path), flag, value])
    with pytest.raises(SystemExit) as exit_:
        main()
    assert exit_.value.code == 2
    error = capsys.readouterr().err
    assert error == f"error: {flag}={value} is invalid: {allowed}\n"
