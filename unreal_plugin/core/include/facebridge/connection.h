// Live Link connection strings for FaceBridge sources ("address=127.0.0.1:50051;subjects=Anna,Ben;token=...;
// max_fps=60"), as the Live Link panel and presets store them. Plain C++ so that GoogleTest covers it.
#pragma once

#include <string>

#include "facebridge/stream_client.h"

namespace facebridge {

// Unknown keys are ignored (newer plugin versions may add some); false and `error` set when a value is invalid.
bool ParseConnectionString(const std::string& text, ClientSettings* out, std::string* error);
std::string FormatConnectionString(const ClientSettings& settings);

}  // namespace facebridge
