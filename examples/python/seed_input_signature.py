"""The seed's element_spec / input_signature example, with sluice.

Prints byte for byte what the seed shows (tests/testdata/seed/seed_input_signature.txt).
"""
import sluice

global_batch_size = 4
epochs = 1
steps_per_epoch = 1
mirrored_strategy = sluice.MirroredStrategy(["GPU:0", "GPU:1"])
dataset = sluice.data.Dataset.from_tensors(([2.])).repeat(100).batch(global_batch_size)
dist_dataset = mirrored_strategy.experimental_distribute_dataset(dataset)


@sluice.function(input_signature=[dist_dataset.element_spec])
def train_step(per_replica_inputs):
    def step_fn(inputs):
        return inputs * inputs  # tf.square
    return mirrored_strategy.run(step_fn, args=(per_replica_inputs,))


for _ in range(epochs):
    iterator = iter(dist_dataset)
    for _ in range(steps_per_epoch):
        output = train_step(next(iterator))
        print(output)
