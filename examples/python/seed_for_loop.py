"""The seed's for-loop example, with sluice in place of tf.distribute.

Prints byte for byte what the seed shows (tests/testdata/seed/seed_for_loop.txt).
"""
import sluice

global_batch_size = 4
strategy = sluice.MirroredStrategy(["GPU:0", "GPU:1"])
dataset = sluice.data.Dataset.from_tensors(([1.], [1.])).repeat(4).batch(global_batch_size)
dist_dataset = strategy.experimental_distribute_dataset(dataset)


def train_step(input):
    features, labels = input
    return labels - 0.3 * features


for x in dist_dataset:
    # train_step trains the model using the dataset elements
    loss = strategy.run(train_step, args=(x,))
    print("Loss is", loss)
