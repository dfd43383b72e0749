"""The training core's batching: seeded order, full passes, and length bucketing."""
from collections import Counter

from agentprm.train.config import TrainConfig
from agentprm.train.core import BUCKET_BATCHES, batches, num_steps


def spread(batch):
    return max(batch) - min(batch)


def test_batches_cover_every_example_once_per_pass_and_repeat_with_the_seed():
    examples = list(range(40))
    one_pass = [x for b in batches(examples, 8, 1.0, seed=3) for x in b]
    assert sorted(one_pass) == examples and one_pass != examples        # shuffled, each example once
    assert one_pass == [x for b in batches(examples, 8, 1.0, seed=3) for x in b]
    assert one_pass != [x for b in batches(examples, 8, 1.0, seed=4) for x in b]


def test_length_bucketing_keeps_the_examples_and_groups_similar_lengths():
    examples = list(range(8 * BUCKET_BATCHES))                         # an example's length is its value
    plain = list(batches(examples, 8, 1.0, seed=0))
    bucketed = list(batches(examples, 8, 1.0, seed=0, length=lambda x: x))
    assert Counter(x for b in bucketed for x in b) == Counter(examples)  # same examples, one pass
    assert max(spread(b) for b in bucketed) < 8 <= min(spread(b) for b in plain)
    assert [min(b) for b in bucketed] != sorted(min(b) for b in bucketed)  # batch order still shuffled
    small = list(range(8 * BUCKET_BATCHES - 1))                          # under one window: plain batches
    assert list(batches(small, 8, 1.0, 0, length=lambda x: x)) == list(batches(small, 8, 1.0, 0))


def test_max_steps_caps_the_steps_epochs_give_and_steps_still_override():
    assert num_steps(100, TrainConfig(epochs=2.0, batch_size=10)) == 20
    assert num_steps(100, TrainConfig(epochs=2.0, batch_size=10, max_steps=7)) == 7       # capped
    assert num_steps(100, TrainConfig(epochs=2.0, batch_size=10, max_steps=50)) == 20     # a cap above: as epochs
    assert num_steps(100, TrainConfig(epochs=2.0, batch_size=10, steps=30, max_steps=7)) == 30
