"""What tokenscope's engine plugins share: the native wire format written by hand (`wire`), the
exporter thread that ships records without ever blocking the engine (`exporter`), and token texts
decoded once per id (`texts`). Each engine's plugin brings its own recorder."""

from .exporter import OFF, Exporter
from .texts import Texts

__all__ = ["OFF", "Exporter", "Texts"]
