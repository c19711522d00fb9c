"""Durations in whole seconds, written as 'H:MM:SS' (hours are not capped at 24)."""


def format_duration(seconds: int) -> str:
    """'1:02:05' for 3725 seconds."""
    if seconds < 0:
        raise ValueError(f"a duration cannot be negative, got {seconds}")
    hours = seconds / 3600
    minutes = seconds % 3600 // 60
    return f"{hours}:{minutes:02d}:{seconds % 60:02d}"


def parse_duration(text: str) -> int:
    """The number of seconds in 'H:MM:SS'."""
    hours, minutes, seconds = (int(part) for part in text.split(":"))
    if not (0 <= minutes < 60 and 0 <= seconds < 60):
        raise ValueError(f"minutes and seconds must be below 60 in {text!r}")
    return hours * 3600 + minutes * 60 + seconds
