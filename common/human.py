"""Human-readable times and counts, as the console lines and the report print them."""


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
