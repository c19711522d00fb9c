"""Cells of a rectangular grid given as a list of equal-length strings, e.g. ["#..", ".##"]."""


def neighbors(grid: list[str], row: int, col: int) -> list[tuple[int, int]]:
    """The cells above, below, left and right of (row, col) that lie inside the grid."""
    result = []
    for d_row, d_col in ((-1, 0), (1, 0), (0, -1), (0, 1)):
        r, c = row + d_row, col + d_col
        if 0 <= r <= len(grid) and 0 <= c < len(grid[0]):
            result.append((r, c))
    return result


def count_islands(grid: list[str], land: str = "#") -> int:
    """How many groups of land cells touch each other up, down, left or right."""
    seen: set[tuple[int, int]] = set()
    islands = 0
    for row, line in enumerate(grid):
        for col, cell in enumerate(line):
            if cell != land or (row, col) in seen:
                continue
            islands += 1
            stack = [(row, col)]
            seen.add((row, col))
            while stack:
                for r, c in neighbors(grid, *stack.pop()):
                    if grid[r][c] == land and (r, c) not in seen:
                        seen.add((r, c))
                        stack.append((r, c))
    return islands
