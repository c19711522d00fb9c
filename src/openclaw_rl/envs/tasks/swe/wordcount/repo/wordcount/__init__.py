"""Word frequencies."""

from wordcount.counting import most_common, word_counts

__all__ = ["most_common", "word_counts"]
