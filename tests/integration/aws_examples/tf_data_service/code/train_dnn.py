"""Horovod Keras over MPI, fed by the tf.data.service of the data group; rank 0 saves the model."""

import argparse
import json
import os

import horovod.tensorflow.keras as hvd
import numpy as np
import tensorflow as tf
import tensorflow_addons as tfa


def dataset(batch_size: int, mode: str, dispatcher: str) -> tf.data.Dataset:
    images = np.random.randint(0, 255, (512, 32, 32, 3), dtype=np.uint8)
    labels = np.random.randint(0, 10, (512, 1))
    ds = tf.data.Dataset.from_tensor_slices((images, labels)).shuffle(512).repeat()
    ds = ds.map(lambda x, y: (tf.cast(x, tf.float32) / 255.0, y), num_parallel_calls=tf.data.AUTOTUNE)
    ds = ds.map(lambda x, y: (tfa.image.gaussian_filter2d(x, (5, 5), 0.8), y), num_parallel_calls=tf.data.AUTOTUNE)
    ds = ds.batch(batch_size)
    if mode == "service":
        ds = ds.apply(tf.data.experimental.service.distribute(processing_mode="parallel_epochs",
                                                              service=f"grpc://{dispatcher}:6000"))
    return ds.prefetch(tf.data.AUTOTUNE)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tf_data_mode", type=str, default="local")
    parser.add_argument("--steps_per_epoch", type=int, default=1)
    parser.add_argument("--batch_size", type=int, required=True)
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--dispatcher_host", type=str)
    parser.add_argument("--num_of_data_workers", type=int, default=1)
    parser.add_argument("--n_gpus", type=str, default=os.environ["SM_NUM_GPUS"])
    parser.add_argument("--model_dir", type=str, default=os.environ["SM_MODEL_DIR"])
    args = parser.parse_args()
    assert args.tf_data_mode in ("local", "service")
    hvd.init()
    for gpu in tf.config.experimental.list_physical_devices("GPU"):
        tf.config.experimental.set_memory_growth(gpu, True)
    model = tf.keras.Sequential([
        tf.keras.layers.Conv2D(8, 3, activation="relu", input_shape=(32, 32, 3)),
        tf.keras.layers.GlobalAveragePooling2D(),
        tf.keras.layers.Dense(10, activation="softmax")])
    optimizer = hvd.DistributedOptimizer(tf.optimizers.Adam(0.001 * hvd.size()))
    model.compile(optimizer=optimizer, loss=tf.keras.losses.SparseCategoricalCrossentropy(),
                  experimental_run_tf_function=False)
    callbacks = [hvd.callbacks.BroadcastGlobalVariablesCallback(0), hvd.callbacks.MetricAverageCallback()]
    history = model.fit(dataset(args.batch_size, args.tf_data_mode, args.dispatcher_host),
                        steps_per_epoch=args.steps_per_epoch, epochs=args.epochs, callbacks=callbacks, verbose=2)
    print("TRAINED " + json.dumps({"rank": hvd.rank(), "size": hvd.size(), "local_rank": hvd.local_rank(),
                                   "epochs": len(history.history["loss"])}), flush=True)
    if hvd.rank() == 0:
        model.save(os.path.join(args.model_dir, "000000001"))


if __name__ == "__main__":
    main()
