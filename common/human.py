"""Human-readable sizes, times and counts, as the console lines and the report print them."""


def human_bytes(count: float | None) -> str:
    """`12.0 KiB`-style size (binary units, as memory is counted)."""
    if count is None:
        return "?"
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(count) < 1024 or unit == "GiB":
            return f"{count:.0f} {unit}" if unit == "B" else f"{count:.1f} {unit}"
        count /= 1024
    return f"{count:.1f} GiB"


def human_time(seconds: float | None) -> str:
    if seconds is None:
        return "?"
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, seconds = divmod(round(seconds), 60)
    return f"{minutes}m{seconds:02d}s" if minutes < 60 else f"{minutes // 60}h{minutes % 60:02d}m"


def human_count(count: float) -> str:
    """`950`, `4.9k`, `1.2M`: a rate in three significant characters or so."""
    for unit, size in (("M", 1e6), ("k", 1e3)):
        if count >= size:
            return f"{count / size:.1f}{unit}"
    return f"{count:.0f}"
