"""Enumerations of the ai.deckhouse.io/v1alpha1 API (seed 000), each defined once."""

from enum import StrEnum


class ModelPhase(StrEnum):
    """Phase is the preparation lifecycle phase, reported together with Conditions."""

    PENDING = "Pending"
    WAIT_FOR_UPLOAD = "WaitForUpload"
    PUBLISHING = "Publishing"
    READY = "Ready"
    FAILED = "Failed"
    DELETING = "Deleting"


class ModelReason(StrEnum):
    """Reasons of a Model's Ready condition while nothing is wrong (failures use
    api_models.errors.ErrorType, whose values are the reasons of a Failed model)."""

    PENDING = "Pending"
    WAIT_FOR_UPLOAD = "WaitForUpload"
    PUBLISHING = "Publishing"
    PUBLISHED = "Published"
    DELETING = "Deleting"


class SourceType(StrEnum):
    """The source provider of a model."""

    HUGGING_FACE = "HuggingFace"
    OLLAMA = "Ollama"
    UPLOAD = "Upload"
    CATALOG = "Catalog"


class ModelFormat(StrEnum):
    """The resolved input format."""

    SAFETENSORS = "Safetensors"
    GGUF = "GGUF"
    DIFFUSERS = "Diffusers"


class ArtifactKind(StrEnum):
    """The artifact location kind exposed by the public API."""

    OCI = "OCI"


class EndpointType(StrEnum):
    """An inference endpoint type a model supports."""

    CHAT = "Chat"
    TEXT_GENERATION = "TextGeneration"
    EMBEDDINGS = "Embeddings"
    RERANK = "Rerank"
    SPEECH_TO_TEXT = "SpeechToText"
    TEXT_TO_SPEECH = "TextToSpeech"
    TRANSLATION = "Translation"
    IMAGE_CLASSIFICATION = "ImageClassification"
    OBJECT_DETECTION = "ObjectDetection"
    IMAGE_SEGMENTATION = "ImageSegmentation"
    IMAGE_TO_TEXT = "ImageToText"
    VISUAL_QUESTION_ANSWERING = "VisualQuestionAnswering"
    IMAGE_GENERATION = "ImageGeneration"
    VIDEO_GENERATION = "VideoGeneration"
    AUDIO_GENERATION = "AudioGeneration"


class ModelFeature(StrEnum):
    """A model feature beyond plain text in, text out."""

    VISION_INPUT = "VisionInput"
    AUDIO_INPUT = "AudioInput"
    AUDIO_OUTPUT = "AudioOutput"
    IMAGE_OUTPUT = "ImageOutput"
    VIDEO_INPUT = "VideoInput"
    VIDEO_OUTPUT = "VideoOutput"
    MULTI_MODAL_INPUT = "MultiModalInput"
    TOOL_CALLING = "ToolCalling"


class CatalogSourceType(StrEnum):
    """The catalog source backend."""

    CATALOG = "Catalog"
    HUGGING_FACE = "HuggingFace"
