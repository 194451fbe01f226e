"""Reward of the SmolLM2 arithmetic example (verl's custom reward signature).

score = 0.5 * correct + 0.5 * concise, so 1.0 only for a right answer on one short line:
- correct: the last integer of the response's first line is the answer. The model restates the
  problem ("1 + 7 = 8") and then often rambles on ("8 + 3 = 11 ... That is a special number,
  9"), so neither the first nor the last integer of the whole text is its answer.
- concise: one line of at most 20 characters, what "Answer with only the number" asks for. It
  is the part a 4-bit 135M model learns quickly from where it starts; alone it would reward any
  short line, hence the sum.
"""

import re

INTEGER = re.compile(r"-?\d+")
MAX_CHARS = 20


def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    text = solution_str.strip()
    numbers = INTEGER.findall(text.split("\n", 1)[0])
    correct = bool(numbers) and int(numbers[-1]) == int(ground_truth)
    concise = "\n" not in text and 0 < len(text) <= MAX_CHARS
    return {"score": 0.5 * correct + 0.5 * concise, "acc": float(correct), "concise": float(concise)}
