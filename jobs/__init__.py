"""What runs on the accelerator: the TPUEstimator-style runner and the BERT jobs.

Imports TensorFlow; never imports the Google Cloud client libraries (gs:// goes through tf.io.gfile).
"""
