"""`python run.py --help` (conf/hydra/help/recall.yaml, Hydra's custom help): the presets with
the first line of each one's description, read from conf/experiment when the page is printed
(`${presets:}`, a resolver registered by `register_help`; run.py registers it)."""

from omegaconf import OmegaConf

from harness.config.compose import CONF_DIR

WIDTH = 96
"""Characters of a preset's line in the help page."""


def description(text: str) -> str:
    """The first line of a config file's leading comment, `# @package` lines left out, without
    its closing `:` or `,`."""
    for line in text.splitlines():
        if not line.startswith("#"):
            break
        line = line.lstrip("#").strip()
        if line and not line.startswith("@package"):
            return line.rstrip(":,")
    return ""


def preset_lines(width: int = WIDTH) -> str:
    """One line per preset of conf/experiment: `  name  description`, cut to `width`."""
    presets = sorted((CONF_DIR / "experiment").glob("*.yaml"))
    pad = max((len(p.stem) for p in presets), default=0)
    lines = []
    for path in presets:
        line = f"  {path.stem:<{pad}}  {description(path.read_text())}".rstrip()
        lines.append(line if len(line) <= width else line[: width - 3].rsplit(" ", 1)[0] + "...")
    return "\n".join(lines)


def register_help() -> None:
    """The `${presets:}` resolver of the help page (idempotent)."""
    OmegaConf.register_new_resolver("presets", preset_lines, replace=True)
