"""The seed's element_spec example, with sluice: the spec in the seed's layout.

Prints byte for byte what the seed shows (tests/testdata/seed/seed_element_spec.txt).
"""
import sluice

global_batch_size = 16
strategy = sluice.MirroredStrategy(["GPU:0", "GPU:1"])
dataset = sluice.data.Dataset.from_tensors(([1.], [2])).repeat(100).batch(global_batch_size)
dist_dataset = strategy.experimental_distribute_dataset(dataset)
print(sluice.pformat(dist_dataset.element_spec))
