"""Rank players by score."""

from leaderboard.ranking import rank, top

__all__ = ["rank", "top"]
