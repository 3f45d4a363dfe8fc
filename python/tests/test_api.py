"""The tf.distribute API surface: iteration, iter/next, get_next_as_optional, element_spec,
experimental_local_results, distribute_datasets_from_function, len(), errors."""

import pytest

import sluice


def _strategy(n=2):
    return sluice.MirroredStrategy(["GPU:%d" % i for i in range(n)])


def test_for_loop_and_len():
    dist = _strategy().experimental_distribute_dataset(sluice.data.parse("range(10).batch(4)"))
    steps = [x for x in dist]
    assert len(steps) == 3 == len(dist)
    # The partial last step: 2 elements over 2 replicas.
    assert [v.numpy().tolist() for v in steps[2].values] == [[8], [9]]


def test_len_unknown_for_infinite_datasets():
    dist = _strategy().experimental_distribute_dataset(
        sluice.data.parse("range(4).repeat().batch(4)"))
    with pytest.raises(TypeError):
        len(dist)


def test_get_next_as_optional_ends_empty():
    dist = _strategy().experimental_distribute_dataset(sluice.data.parse("range(4).batch(4)"))
    it = iter(dist)
    first = it.get_next_as_optional()
    assert first.has_value()
    assert [v.numpy().tolist() for v in first.get_value().values] == [[0, 1], [2, 3]]
    end = it.get_next_as_optional()
    assert not end.has_value()
    with pytest.raises(sluice.errors.InvalidArgumentError):
        end.get_value()
    with pytest.raises(StopIteration):
        next(it)


def test_each_iter_starts_a_new_pass():
    dist = _strategy().experimental_distribute_dataset(sluice.data.parse("range(4).batch(4)"))
    a = next(iter(dist))
    b = next(iter(dist))
    assert a.values[0].numpy().tolist() == b.values[0].numpy().tolist() == [0, 1]


def test_element_spec_on_dataset_and_iterator():
    dist = _strategy().experimental_distribute_dataset(
        sluice.data.Dataset.from_tensors(([1.], [2])).repeat(100).batch(16))
    spec = dist.element_spec
    assert spec == iter(dist).element_spec
    assert spec[0] == sluice.PerReplicaSpec(sluice.TensorSpec((None, 1), "float32"),
                                            sluice.TensorSpec((None, 1), "float32"))
    assert repr(spec[1].specs[0]) == "TensorSpec(shape=(None, 1), dtype=tf.int32, name=None)"


def test_experimental_local_results_of_a_structure():
    strategy = _strategy()
    ds = sluice.data.Dataset.from_tensor_slices(({"a": [1, 2, 3, 4]}, [5, 6, 7, 8])).batch(4)
    x = next(iter(strategy.experimental_distribute_dataset(ds)))
    local = strategy.experimental_local_results(x)
    assert len(local) == 2
    assert local[1][0]["a"].numpy().tolist() == [3, 4]
    assert local[0][1].numpy().tolist() == [5, 6]
    assert strategy.experimental_local_results(3) == (3,)


def test_one_replica_gives_plain_tensors():
    strategy = sluice.MirroredStrategy(["CPU:0"])
    x = next(iter(strategy.experimental_distribute_dataset(sluice.data.parse("range(4).batch(2)"))))
    assert isinstance(x, sluice.Tensor)
    assert strategy.experimental_local_results(x) == (x,)


def test_distribute_datasets_from_function_passes_the_input_context():
    strategy = _strategy()
    seen = []

    def dataset_fn(ctx):
        seen.append((ctx.num_input_pipelines, ctx.input_pipeline_id, ctx.num_replicas_in_sync))
        return sluice.data.Dataset.range(8).batch(ctx.get_per_replica_batch_size(4))

    dist = strategy.distribute_datasets_from_function(dataset_fn)
    assert seen == [(1, 0, 2)]
    x = next(iter(dist))
    assert [v.numpy().tolist() for v in x.values] == [[0, 1], [2, 3]]


def test_dataset_fn_exceptions_propagate_unchanged():
    def dataset_fn(ctx):
        raise KeyError("boom")

    with pytest.raises(KeyError):
        _strategy().distribute_datasets_from_function(dataset_fn)


def test_input_context_rejects_uneven_batches():
    with pytest.raises(sluice.errors.InvalidArgumentError):
        sluice.InputContext(1, 0, 3).get_per_replica_batch_size(4)


def test_errors_carry_code_and_message():
    with pytest.raises(sluice.errors.InvalidArgumentError) as e:
        _strategy().experimental_distribute_dataset(sluice.data.parse("range(8)"))
    assert e.value.code == sluice.errors.INVALID_ARGUMENT
    assert "Call the `batch` method" in e.value.message
    with pytest.raises(sluice.errors.InvalidArgumentError) as e:
        sluice.data.parse("range(8).batch(0)")
    assert "batch_size must be positive" in str(e.value)
    with pytest.raises(sluice.errors.InvalidArgumentError):
        sluice.MirroredStrategy(["GPU:0", "GPU:0"])
    with pytest.raises(sluice.errors.NotFoundError):
        next(iter(_strategy().experimental_distribute_dataset(
            sluice.data.Dataset.text_line_dataset(["/nonexistent/sluice.txt"]).batch(2))))


def test_builder_and_parser_agree():
    built = sluice.data.Dataset.from_tensor_slices([1, 2, 3, 4]).repeat().batch(4)
    parsed = sluice.data.parse("from_tensor_slices([1, 2, 3, 4]).repeat().batch(4)")
    assert built.fingerprint() == parsed.fingerprint()
    assert sluice.data.Dataset.range(10).map("cast(tf.float32)").element_spec == \
        sluice.TensorSpec((), "float32")
    assert sluice.data.Dataset.range(10).filter("less(5)").batch(5).cardinality() in (-2, 1)


def test_function_input_signature_rejects_mismatches():
    strategy = _strategy()
    dist = strategy.experimental_distribute_dataset(sluice.data.parse("range(8).batch(4)"))

    @sluice.function(input_signature=[dist.element_spec])
    def step(x):
        return strategy.run(lambda v: v * 2, args=(x,))

    out = step(next(iter(dist)))
    assert out.values[1].numpy().tolist() == [4, 6]
    with pytest.raises(sluice.errors.InvalidArgumentError):
        step(sluice.PerReplica([sluice.constant([1.]), sluice.constant([2.])]))
