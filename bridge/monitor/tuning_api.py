"""The monitor page's tuning API: each subject's blendshape mapping tuned live (bridge/runtime/tuning.py).

    GET  /api/tuning?subject=S          the mapping, the weights before and after it, their peaks, the range steps
    POST /api/tuning/shape              {"subject", "name", "gain"?, "dead_zone"?, "gamma"?, ...}: one blendshape's
                                        settings, checked as a mapping file's are, applied from the next frame
    POST /api/tuning/peaks/reset        {"subject"}: peaks start again (the range calibration's first step)
    POST /api/tuning/ranges             {"subject"}: gains from the peaks since the reset (bridge/ranges.py)
    POST /api/tuning/save               {"subject"}: the mapping stored in the subject's profile

The routes sit behind the monitor's own checks (loopback or token, same origin). A bad setting is answered 400
with the problem and the fix; nothing is half-applied.
"""
from __future__ import annotations

import asyncio

from aiohttp import web

from bridge.errors import FaceBridgeError


def add_routes(app: web.Application, control, json_body, refuse) -> None:
    """Register the routes; `json_body(request)` reads a JSON object, `refuse(status, problem, fix)` answers."""

    def tuning_or_none():
        return getattr(control, "tuning", None) if control is not None else None

    def subject_of(body_or_query) -> str:
        return str(body_or_query.get("subject") or getattr(control, "subject", "FaceBridge"))

    async def view(request):
        tuning = tuning_or_none()
        if tuning is None:
            return refuse(409, "this bridge has no mapping to tune", "run `facebridge run`")
        return web.json_response(tuning.view(subject_of(request.query)))

    async def shape(request):
        tuning = tuning_or_none()
        if tuning is None:
            return refuse(409, "this bridge has no mapping to tune", "run `facebridge run`")
        body = await json_body(request)
        settings = {k: v for k, v in body.items() if k not in ("subject", "name")}
        try:
            mapping = tuning.set_shape(subject_of(body), str(body.get("name")), settings)
        except FaceBridgeError as e:
            return refuse(400, e.problem, e.fix)
        return web.json_response({"ok": True, "mapping": mapping.to_dict()})

    async def reset_peaks(request):
        tuning = tuning_or_none()
        if tuning is None:
            return refuse(409, "this bridge has no mapping to tune", "run `facebridge run`")
        tuning.reset_peaks(subject_of(await json_body(request)))
        return web.json_response({"ok": True})

    async def ranges(request):
        tuning = tuning_or_none()
        if tuning is None:
            return refuse(409, "this bridge has no mapping to tune", "run `facebridge run`")
        results = tuning.apply_ranges(subject_of(await json_body(request)))
        seen = [r for r in results if r.gain is not None]
        return web.json_response({"ok": bool(seen), "message": f"ranges set for {len(seen)} of {len(results)} "
                                  "blendshapes" + ("" if seen else ": no expression was seen; face the camera"),
                                  "results": [{"name": r.name, "peak": round(r.peak, 3), "gain": r.gain}
                                              for r in results]})

    async def save(request):
        tuning = tuning_or_none()
        if tuning is None:
            return refuse(409, "this bridge has no mapping to tune", "run `facebridge run`")
        subject = subject_of(await json_body(request))
        try:
            path = await asyncio.get_running_loop().run_in_executor(None, tuning.save, subject)
        except (FaceBridgeError, OSError) as e:
            return refuse(500, f"the mapping was not saved ({e})", "check the profiles folder")
        return web.json_response({"ok": True, "message": f"saved the mapping of '{subject}' to {path}"})

    app.router.add_get("/api/tuning", view)
    app.router.add_post("/api/tuning/shape", shape)
    app.router.add_post("/api/tuning/peaks/reset", reset_peaks)
    app.router.add_post("/api/tuning/ranges", ranges)
    app.router.add_post("/api/tuning/save", save)
