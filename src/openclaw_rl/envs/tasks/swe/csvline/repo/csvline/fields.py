"""Split and join comma-separated lines (no quoting: a field never holds the separator)."""


def split_fields(line: str, separator: str = ";") -> list[str]:
    """The fields of one line, comma-separated by default, each stripped of surrounding spaces."""
    return [field.strip() for field in line.split(separator)]


def join_fields(fields: list[str], separator: str = ",") -> str:
    return separator.join(fields)


def parse_table(text: str, separator: str = ",") -> list[dict[str, str]]:
    """Rows as dicts keyed by the header line's fields; blank lines are skipped."""
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines:
        return []
    header = split_fields(lines[0], separator)
    return [dict(zip(header, split_fields(line, separator))) for line in lines[1:]]
