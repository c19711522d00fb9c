"""Turn titles into URL slugs: lowercase letters and digits joined by a separator."""

import re


def slugify(title: str, separator: str = "-") -> str:
    """Lowercase the title and turn each run of other characters into one separator."""
    slug = re.sub(r"[^a-z0-9]+", separator, title.lower())
    return slug


def unique_slug(title: str, taken: set[str], separator: str = "-") -> str:
    """The title's slug, with -2, -3, ... appended until it is not in `taken`."""
    base = slugify(title, separator)
    slug, n = base, 2
    while slug in taken:
        slug, n = f"{base}{separator}{n}", n + 1
    return slug
