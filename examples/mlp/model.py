"""A small Keras classifier on the runner (``job: keras``, docs/own-code.md).

The data are points around ``classes`` centres in ``features`` dimensions, made from
``params["data_seed"]`` (the same centres for every split, other points per split), so the
example needs no download. The train split goes through :func:`jobs.keras.inputs.train_batches`:
global batch N is a function of (data, seed, N), which is what makes a preempted run end with the
weights of an uninterrupted one, on one host or a slice of four. The model, loss, metrics and
predictions are written with ``keras.ops``, so the module runs unchanged on either backend
(``--set backend=jax`` or ``tensorflow``); only the input pipeline is ``tf.data``.
"""

import keras
import numpy as np
import tensorflow as tf  # noqa: F401 - tf.data is what dataset() returns; the rest is keras.ops

from jobs.keras.inputs import eval_batches, train_batches

SPLIT_SEEDS = {"train": 1, "eval": 2, "predict": 3}


def points(params, split):
    """(features float32 [n, features], labels int32 [n]) of ``split``."""
    centres = np.random.default_rng(params["data_seed"]).normal(
        scale=2.0, size=(params["classes"], params["features"]))
    rng = np.random.default_rng([params["data_seed"], SPLIT_SEEDS[split]])
    n = params["train_examples"] if split == "train" else params["eval_examples"]
    labels = rng.integers(params["classes"], size=n)
    features = centres[labels] + rng.normal(size=(n, params["features"]))
    return features.astype(np.float32), labels.astype(np.int32)


def model(params):
    inputs = keras.Input(shape=(params["features"],), name="features")
    hidden = keras.layers.Dense(params["hidden"], activation="relu", name="hidden")(inputs)
    logits = keras.layers.Dense(params["classes"], name="logits")(hidden)
    return keras.Model(inputs, logits, name="mlp")


def dataset(params, split, context):
    if split == "train":
        return train_batches(points(params, split), params, context)
    return eval_batches(points(params, split), params, context)


def loss(labels, outputs):
    return keras.losses.sparse_categorical_crossentropy(labels, outputs, from_logits=True)


def metrics(labels, outputs):
    predicted = keras.ops.argmax(outputs, axis=-1)
    return {"accuracy": keras.ops.cast(keras.ops.equal(predicted, labels), "float32")}


def predict(outputs):
    return {"label": keras.ops.argmax(outputs, axis=-1), "probabilities": keras.ops.softmax(outputs)}
