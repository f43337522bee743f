"""The inspection activity (`activity.py`, `model.inspect`): what a spooled model directory is, or why it is
not a model.

The reading itself (the headers of safetensors, GGUF and diffusers files; archives) is clients/model_files/,
which the upload endpoint shares.
"""
