"""FaceBridge: webcam and microphone to real-time facial animation for Unreal Engine and Omniverse."""

__version__ = "0.1.0"
