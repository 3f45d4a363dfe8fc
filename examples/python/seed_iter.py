"""The seed's __iter__ example, with sluice.

Prints byte for byte what the seed shows (tests/testdata/seed/seed_iter.txt).
"""
import sluice

global_batch_size = 4
strategy = sluice.MirroredStrategy(["GPU:0", "GPU:1"])
dataset = sluice.data.Dataset.from_tensor_slices([1, 2, 3, 4]).repeat().batch(global_batch_size)
distributed_iterator = iter(strategy.experimental_distribute_dataset(dataset))
print(next(distributed_iterator))
