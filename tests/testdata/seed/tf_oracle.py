import tensorflow as tf
cpus = tf.config.list_physical_devices('CPU')
tf.config.set_logical_device_configuration(cpus[0], [tf.config.LogicalDeviceConfiguration()]*2)
DEV = ["CPU:0", "CPU:1"]
print("=====for_loop")
global_batch_size = 4
strategy = tf.distribute.MirroredStrategy(DEV)
dataset = tf.data.Dataset.from_tensors(([1.],[1.])).repeat(4).batch(global_batch_size)
dist_dataset = strategy.experimental_distribute_dataset(dataset)
@tf.function
def train_step(input):
  features, labels = input
  return labels - 0.3 * features
for x in dist_dataset:
  loss = strategy.run(train_step, args=(x,))
  print("Loss is", loss)
print("=====explicit_iterator")
train_dataset = tf.data.Dataset.from_tensors(([1.],[1.])).repeat(50).batch(global_batch_size)
train_dist_dataset = strategy.experimental_distribute_dataset(train_dataset)
@tf.function
def distributed_train_step(dataset_inputs):
  def train_step(input):
    loss = tf.constant(0.1)
    return loss
  per_replica_losses = strategy.run(train_step, args=(dataset_inputs,))
  return strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica_losses,axis=None)
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
  print (template.format(epoch+1, average_train_loss))
print("=====input_signature")
mirrored_strategy = strategy
dataset = tf.data.Dataset.from_tensors(([2.])).repeat(100).batch(global_batch_size)
dist_dataset = mirrored_strategy.experimental_distribute_dataset(dataset)
@tf.function(input_signature=[dist_dataset.element_spec])
def train_step2(per_replica_inputs):
  def step_fn(inputs):
    return tf.square(inputs)
  return mirrored_strategy.run(step_fn, args=(per_replica_inputs,))
for _ in range(1):
  iterator = iter(dist_dataset)
  for _ in range(1):
    output = train_step2(next(iterator))
    print(output)
print("=====element_spec")
dataset = tf.data.Dataset.from_tensors(([1.],[2])).repeat(100).batch(16)
dist_dataset = strategy.experimental_distribute_dataset(dataset)
print(repr(dist_dataset.element_spec))
print("=====iter")
dataset = tf.data.Dataset.from_tensor_slices([1, 2, 3, 4]).repeat().batch(4)
distributed_iterator = iter(strategy.experimental_distribute_dataset(dataset))
print(next(distributed_iterator))
print("=====end")
