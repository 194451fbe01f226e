"""The run's last line (trainer/rl.RunSummary): a rule's 0/1 score is an accuracy in %, a reward model's score is
shown as the number it is, never as an accuracy."""

from hybridrl.trainer.rl import RunSummary


def test_rule_scores_read_as_accuracy_points():
    line = RunSummary(100, 0.356, 0.582, 904.2, 440.0, 100).line()
    assert line == ("done: 100 steps (at step 100), validation accuracy 35.6% -> 58.2% (+22.6 points), "
                    "wall 904s (cpu 440s)")


def test_reward_model_scores_are_not_called_accuracy():
    line = RunSummary(100, 1.066, 2.413, 10.0, 9.0, 100, accuracy=False).line()
    assert "accuracy" not in line and "%" not in line
    assert "validation reward-model score 1.066 -> 2.413 (+1.347)" in line
    assert RunSummary(3, None, 0.5, 1.0, 1.0, 3, accuracy=False).line().startswith(
        "done: 3 steps (at step 3), validation reward-model score 0.5,")
