from hybridrl.data.sampler import PromptSampler


def test_each_epoch_is_a_permutation_and_the_tail_is_dropped():
    s = PromptSampler(size=10, batch_size=3, seed=0)
    epoch0 = [s.next_batch() for _ in range(3)]  # 9 of 10; the 10th is dropped
    flat = [i for b in epoch0 for i in b]
    assert len(set(flat)) == 9
    first_of_epoch1 = s.next_batch()
    assert s.epoch == 1 and len(first_of_epoch1) == 3
    assert flat != list(range(9))  # shuffled


def test_no_shuffle_is_in_order():
    s = PromptSampler(size=5, batch_size=2, seed=0, shuffle=False)
    assert [s.next_batch(), s.next_batch(), s.next_batch()] == [[0, 1], [2, 3], [0, 1]]


def test_state_dict_resumes_the_exact_next_batches():
    a = PromptSampler(size=17, batch_size=4, seed=5)
    for _ in range(6):
        a.next_batch()
    b = PromptSampler(size=17, batch_size=4, seed=5)
    b.load_state_dict(a.state_dict())
    assert [a.next_batch() for _ in range(5)] == [b.next_batch() for _ in range(5)]
