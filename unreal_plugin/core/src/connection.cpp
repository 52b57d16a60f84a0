#include "facebridge/connection.h"

#include <cstdlib>
#include <sstream>

namespace facebridge {

namespace {

std::string Trim(const std::string& s) {
  const auto begin = s.find_first_not_of(" \t\r\n");
  if (begin == std::string::npos) return "";
  const auto end = s.find_last_not_of(" \t\r\n");
  return s.substr(begin, end - begin + 1);
}

std::vector<std::string> Split(const std::string& s, char sep) {
  std::vector<std::string> parts;
  std::string part;
  std::istringstream in(s);
  while (std::getline(in, part, sep)) parts.push_back(part);
  return parts;
}

bool ValidAddress(const std::string& address) {
  const auto colon = address.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 >= address.size()) return false;
  char* end = nullptr;
  const long port = std::strtol(address.c_str() + colon + 1, &end, 10);
  return *end == '\0' && port > 0 && port <= 65535;
}

}  // namespace

bool ParseConnectionString(const std::string& text, ClientSettings* out, std::string* error) {
  ClientSettings settings = *out;
  for (const std::string& item : Split(text, ';')) {
    const std::string entry = Trim(item);
    if (entry.empty()) continue;
    const auto eq = entry.find('=');
    if (eq == std::string::npos) {
      if (error) *error = "'" + entry + "' is not key=value";
      return false;
    }
    const std::string key = Trim(entry.substr(0, eq));
    const std::string value = Trim(entry.substr(eq + 1));
    if (key == "address") {
      if (!ValidAddress(value)) {
        if (error) *error = "address '" + value + "' is not HOST:PORT (e.g. 127.0.0.1:50051)";
        return false;
      }
      settings.address = value;
    } else if (key == "token") {
      settings.token = value;
    } else if (key == "subjects") {
      settings.subjects.clear();
      for (const std::string& s : Split(value, ',')) {
        if (!Trim(s).empty()) settings.subjects.push_back(Trim(s));
      }
    } else if (key == "max_fps") {
      char* end = nullptr;
      const double fps = std::strtod(value.c_str(), &end);
      if (value.empty() || *end != '\0' || !(fps >= 0.0) || fps > 1000.0) {
        if (error) *error = "max_fps '" + value + "' is not a number from 0 to 1000";
        return false;
      }
      settings.max_frame_rate = fps;
    }
  }
  *out = settings;
  return true;
}

std::string FormatConnectionString(const ClientSettings& settings) {
  std::string text = "address=" + settings.address;
  if (!settings.subjects.empty()) {
    text += ";subjects=";
    for (size_t i = 0; i < settings.subjects.size(); ++i) text += (i ? "," : "") + settings.subjects[i];
  }
  if (settings.max_frame_rate > 0.0) {
    std::ostringstream fps;
    fps << settings.max_frame_rate;
    text += ";max_fps=" + fps.str();
  }
  if (!settings.token.empty()) text += ";token=" + settings.token;
  return text;
}

}  // namespace facebridge
