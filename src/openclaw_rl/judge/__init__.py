"""The judge: turns (turn, next state) pairs into votes, a majority reward and hints.

The pure parts live here as plain functions so that they can be tested without a model:

- `prompts`  builds the evaluative and directive chat prompts; user text, tool output
             and the policy's own response are data in delimited blocks, never
             instructions (the policy is trained on the judge's output, so a response
             that could steer the judge would be reward hacking).
- `votes`    parses one judge answer into a score or a (correction, hint) pair, takes the
             majority, and deduplicates hints. An unparseable answer raises, so it is
             dropped rather than counted as a 0.
- `overlap`  overlap-guided hint selection on top-k token sets (docs/method.md §2, step 6).
- `rules`    the rule-based hint extractor used by the CPU judge.
"""
