// The browser page the HTTP front serves at GET / (server/web/index.html, compiled in by CMake
// so the server needs no files at run time): microphone capture (AudioWorklet, 16 kHz mono)
// streamed over the WebSocket /v1/stream with live partial and final text, and a file upload
// to POST /v1/audio/transcriptions. Thread-safety: immutable.
#ifndef JASPER_SERVER_WEB_PAGE_H_
#define JASPER_SERVER_WEB_PAGE_H_

namespace jasper::server {

// The page's HTML (with its script and style inline).
const char* IndexHtml();

}  // namespace jasper::server

#endif  // JASPER_SERVER_WEB_PAGE_H_
