"""`facebridge bench serve` end to end on the CPU runners: two plain server processes, two client processes, one
short count; the JSON holds every count (written as each ends to `.partial`, which a finished run removes) and its
counters add up. A smoke run: what it measures is read from the JSON of a real run (docs/PERFORMANCE.md), never
asserted here."""
from __future__ import annotations

import json
import subprocess
import time

from tests.helpers import facebridge_cmd, subprocess_env


def test_bench_serve_writes_each_count_and_its_counters_add_up(tmp_path):
    out = tmp_path / "serve.json"
    run = subprocess.run(facebridge_cmd("bench", "serve", "--streams", "2", "--seconds", "6", "--warmup", "2",
                                        "--fps", "5", "--server-processes", "2", "--client-processes", "2",
                                        "--deadline-ms", "60000", "--serve-args", "--decode-workers 1",
                                        "--json", str(out)),
                         capture_output=True, text=True, env=subprocess_env(tmp_path / "home"), timeout=600)
    assert run.returncode == 0, (run.stdout + run.stderr)[-3000:]
    results = json.loads(out.read_text())["results"]
    assert results["serve_args"] == "--decode-workers 1" and results["mps"] is False
    assert not out.with_name("serve.json.partial").exists() and results["server_processes"] == 2
    assert len(results["addresses"]) == 2 and results["gpu"] is None and results["min_served_share"] == 0.95
    (trial,) = results["trials"]
    assert trial["streams"] == 2 and trial["frames_sent"] > 0 and trial["errors"] == []
    assert trial["frames_sent"] == (trial["frames_served"] + trial["dropped_stale"] + trial["dropped_late"]
                                    + trial["bad_frames"] + trial["unanswered"])
    assert sorted(trial["streams_per_replica"].values()) == [1, 1]  # one stream on each server process
    assert trial["replica_moves_within_a_stream"] == 0 and trial["reconnects"] == 0
    assert 0 <= trial["served_share"]["min"] <= trial["served_share"]["p50"] <= 1
    assert trial["streams_within_p99_limit"] <= trial["streams_p99_within_limit_any_share"] <= 2
    start, end = trial["measured_unix"]  # the window its clients measured, on the wall clock (6 s, 2 not measured)
    assert abs(end - start - 4.0) < 0.01 and end < time.time()
    assert {"queue", "pass", "to_describe"} <= set(trial["server_stage_ms_p50"])  # the track stage split


def test_bench_serve_in_flight_holds_frames_back_at_the_sender(tmp_path):
    # --in-flight 1: a stream sends its next frame only once the last is answered (as `run --remote` does), so the
    # server never holds two frames of one stream and drops none as stale; what the clients held back is counted,
    # and with the frames sent it makes every frame the cameras made (seconds x fps per stream)
    out = tmp_path / "serve.json"
    run = subprocess.run(facebridge_cmd("bench", "serve", "--streams", "2", "--seconds", "6", "--warmup", "2",
                                        "--fps", "30", "--in-flight", "1", "--deadline-ms", "60000",
                                        "--json", str(out)),
                         capture_output=True, text=True, env=subprocess_env(tmp_path / "home"), timeout=600)
    assert run.returncode == 0, (run.stdout + run.stderr)[-3000:]
    (trial,) = json.loads(out.read_text())["results"]["trials"]
    assert trial["in_flight"] == 1 and trial["errors"] == [] and trial["reconnects"] == 0
    assert trial["dropped_stale"] == 0 and trial["dropped_late"] == 0 and trial["unanswered"] <= 2
    assert trial["frames_sent"] + trial["dropped_at_client"] == 2 * 6 * 30
    assert trial["frames_served"] > 0 and 0 <= trial["served_share"]["min"] <= 1


def test_bench_serve_refuses_a_negative_in_flight(tmp_path):
    run = subprocess.run(facebridge_cmd("bench", "serve", "--in-flight", "-1"), capture_output=True, text=True,
                         env=subprocess_env(tmp_path / "home"), timeout=120)
    assert run.returncode != 0 and "--in-flight -1 is negative" in run.stderr and "Traceback" not in run.stderr


def test_bench_serve_drives_both_wires_in_turn_on_one_server(tmp_path):
    # --wire track,many: a trial over Track, then one over TrackMany (each client process's streams on one call,
    # the frames due together in one message), on the same server (an engine process and its front end); each with
    # the same records and sums, the server's CPU a frame by part (the engine's threads, which its front end
    # reports, counted once), the client's, and many's share of track's
    out = tmp_path / "serve.json"
    run = subprocess.run(facebridge_cmd("bench", "serve", "--streams", "3", "--seconds", "6", "--warmup", "2",
                                        "--fps", "10", "--in-flight", "1", "--deadline-ms", "60000",
                                        "--serve-args", "--front-ends 1 --updates off",
                                        "--wire", "track,many", "--json", str(out)),
                         capture_output=True, text=True, env=subprocess_env(tmp_path / "home"), timeout=600)
    assert run.returncode == 0, (run.stdout + run.stderr)[-3000:]
    results = json.loads(out.read_text())["results"]
    assert results["wires"] == ["track", "many"] and results["server_processes"] == 1
    assert [t["wire"] for t in results["trials"]] == ["track", "many"]
    for trial in results["trials"]:
        assert trial["errors"] == [] and trial["streams"] == 3
        assert trial["frames_sent"] + trial["dropped_at_client"] == 3 * 6 * 10
        assert trial["frames_sent"] == (trial["frames_served"] + trial["dropped_stale"] + trial["dropped_late"]
                                        + trial["bad_frames"] + trial["unanswered"])
        assert trial["frames_served"] > 0 and trial["dropped_stale"] == 0
        assert trial["server_frames_served_in_window"] > 0  # the server's own count: the CPU a frame's divisor
        assert 1.0 <= trial["frames_a_pass"] <= 3  # the engine's passes of the front end's 3 streams
        assert abs(trial["frames_a_whole_pass"] - trial["frames_a_pass"]) < 0.5  # one front end: its share is all
        threads, part = trial["server_thread_cpu_ms_per_frame"], trial["server_cpu_ms_per_frame_by_part"]
        engine = {k.split(":", 2)[2]: v for k, v in threads.items() if k.startswith("engine:")}
        assert "serve-loop" in threads and "engine-link" in threads and part["passes"] == engine["face-service"]
        engine_host = sum(v for k, v in engine.items() if k not in ("face-service", "engine-decode", "engine-jpeg"))
        assert part["engine"] > 0 and abs(part["engine"] - engine_host) < 0.001
        busiest = trial["engine_busiest_thread"]  # in cores over the 4 s measured: the CPU runners' pass thread
        assert busiest["thread"] == "face-service" and 0 < busiest["cores"] <= 1.05
        assert abs(busiest["cores"] - engine["face-service"] * trial["server_frames_served_in_window"] / 4000) < 0.01
        assert part["passes_in_host_path"] is False  # CPU runners: the passes are the inference
        assert abs(sum(threads.values()) - part["host_path"] - part["passes"] - part["jpeg_decode"]
                   - part["identity_refresh"]) < 0.01
        assert part["host_path"] >= part["front_end"] >= threads["serve-loop"] > 0
        latency = trial["latency_ms_per_stream"]
        assert 0 < latency["p50_median_stream"] <= latency["p99_median_stream"] <= latency["p99_worst_stream"]
        assert trial["client_cpu_ms_per_frame_sent"] > 0
        faceless = trial["faceless_frames"]  # the sample has a face in every frame: where any went missing
        waited = faceless["before_first_face"]  # a new stream's frames before the detector found its face
        assert (faceless["frames"] + waited["frames"] == 0) == (trial["face_found_share"] == 1.0)
        assert waited["most_in_a_stream"] <= waited["frames"] and waited["streams"] <= 3
        assert faceless["streams"] <= 3 and faceless["most_in_a_stream"] <= faceless["frames"]
        assert len(faceless["earliest"]) == min(10, faceless["frames"])
        assert sum(faceless["by_second"]) <= faceless["frames"] == sum(faceless["by_address"].values())
        assert set(faceless["by_address"]) <= set(results["addresses"])
    (ratio,) = results["wire_ratios"]
    assert ratio["streams"] == 3 and ratio["track"]["trials"] == ratio["many"]["trials"] == 1
    assert ratio["many_over_track"]["host_path_ms"] == round(ratio["many"]["host_path_ms"]
                                                             / ratio["track"]["host_path_ms"], 3)


def test_bench_serve_refuses_an_unknown_wire(tmp_path):
    run = subprocess.run(facebridge_cmd("bench", "serve", "--wire", "track,carrier-pigeon"), capture_output=True,
                         text=True, env=subprocess_env(tmp_path / "home"), timeout=120)
    assert run.returncode != 0 and "track,many" in run.stderr and "Traceback" not in run.stderr


def test_faceless_frames_are_placed_by_second_and_by_the_address_their_stream_went_to():
    from bridge.bench.serve import _faceless, _stream_record

    streams = [_stream_record(i) for i in range(4)]
    for sid, times in ((1, [0.2, 0.4, 2.5]), (3, [2.1])):  # streams 1 and 3 go to the second of two addresses
        streams[sid].update(faceless=len(times), faceless_at=times)
    out = _faceless(streams, ["a:1", "b:2"])
    assert out["frames"] == 4 and out["streams"] == 2 and out["most_in_a_stream"] == 3
    assert out["by_second"] == [2, 0, 2] and out["by_address"] == {"b:2": 4}
    assert [e["stream"] for e in out["earliest"]] == [1, 1, 3, 1]


def test_a_streams_frames_before_its_first_face_are_not_counted_as_faces_lost():
    """A stream starting waits for the detector (on a GPU, for one of a pass's bounded slots: hundreds of streams
    starting at once wait passes for theirs); only a face lost after it was found counts in faceless_frames. Found
    before the measured window counts as found."""
    from types import SimpleNamespace

    from bridge.bench.serve import _faceless, _record_frame, _stream_record

    def served(record, face_found, at):
        _record_frame(record, SimpleNamespace(source_time=at, face_found=face_found, latencies_ms={}), 0, 100.0)

    starting, warmed = _stream_record(0), _stream_record(1)
    for face, at in ((False, 101.0), (False, 101.1), (True, 101.2), (False, 101.3), (True, 101.4)):
        served(starting, face, at)
    served(warmed, True, 99.0)  # before the window
    served(warmed, False, 100.5)
    out = _faceless([starting, warmed], ["a:1"])
    assert starting["before_first_face"] == 2 and starting["faceless"] == 1 and starting["faces"] == 2
    assert warmed["before_first_face"] == 0 and warmed["faceless"] == 1
    assert out["frames"] == 2 and out["streams"] == 2
    assert out["before_first_face"] == {"streams": 1, "frames": 2, "most_in_a_stream": 2}
