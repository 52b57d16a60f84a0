"""Omniverse Kit entry point (facebridge.livelink/config/extension.toml): subscribe on startup, apply the newest
frames to the open stage on every Kit update, stop on shutdown. Imports Kit modules, so it only loads in Kit;
the logic it wires up lives in live_stream.py and is tested with usd-core."""
from __future__ import annotations

import carb
import carb.settings
import omni.ext
import omni.kit.app
import omni.usd

from bridge.omniverse.live_stream import StageApplier, StreamSubscription

SETTINGS = "/exts/facebridge.livelink"


class FaceBridgeLiveLinkExtension(omni.ext.IExt):
    def on_startup(self, ext_id: str) -> None:
        settings = carb.settings.get_settings()
        address = settings.get(f"{SETTINGS}/address") or "127.0.0.1:50051"
        self._prim_path = settings.get(f"{SETTINGS}/primPath") or "/FaceBridge"
        self._subscription = StreamSubscription(address, token=settings.get(f"{SETTINGS}/token") or "",
                                                subjects=settings.get(f"{SETTINGS}/subjects") or ())
        self._subscription.start()
        self._applier: StageApplier | None = None
        self._last_status = ""
        stream = omni.kit.app.get_app().get_update_event_stream()
        self._update = stream.create_subscription_to_pop(self._on_update, name="facebridge.livelink")
        carb.log_info(f"FaceBridge Live Link: subscribing to {address}")

    def _on_update(self, _event) -> None:
        stage = omni.usd.get_context().get_stage()
        if stage is None:
            return
        if self._applier is None or self._applier.stage != stage:  # a new stage was opened
            self._applier = StageApplier(stage, self._prim_path)
        for message in self._subscription.drain():
            try:
                self._applier.apply(message)
            except Exception as e:  # noqa: BLE001 - one bad frame must not stop the updates
                carb.log_warn(f"FaceBridge Live Link: frame not applied ({e})")
        if self._subscription.status != self._last_status:
            self._last_status = self._subscription.status
            carb.log_info(f"FaceBridge Live Link: {self._last_status}")

    def on_shutdown(self) -> None:
        self._update = None
        self._subscription.stop()
        self._applier = None
