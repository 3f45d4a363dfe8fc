"""The seed's explicit-iterator example (iter() and next()), with sluice.

Prints byte for byte what the seed shows (tests/testdata/seed/seed_explicit_iterator.txt).
"""
import sluice

global_batch_size = 4
strategy = sluice.MirroredStrategy(["GPU:0", "GPU:1"])
train_dataset = sluice.data.Dataset.from_tensors(([1.], [1.])).repeat(50).batch(global_batch_size)
train_dist_dataset = strategy.experimental_distribute_dataset(train_dataset)


def distributed_train_step(dataset_inputs):
    def train_step(input):
        loss = sluice.constant(0.1)
        return loss
    per_replica_losses = strategy.run(train_step, args=(dataset_inputs,))
    return strategy.reduce(sluice.ReduceOp.SUM, per_replica_losses, axis=None)


EPOCHS = 2
STEPS = 3
for epoch in range(EPOCHS):
    total_loss = 0.0
    num_batches = 0
    dist_dataset_iterator = iter(train_dist_dataset)
    for _ in range(STEPS):
        total_loss += distributed_train_step(next(dist_dataset_iterator))
        num_batches += 1
    average_train_loss = total_loss / num_batches
    template = ("Epoch {}, Loss: {:.4f}")
    print(template.format(epoch + 1, average_train_loss))
