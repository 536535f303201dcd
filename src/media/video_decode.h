// Video bytes (any container and codec Debian's FFmpeg reads: mp4, webm, mkv, avi, ...) to the frames
// the model sees: FFmpeg decodes from memory, sample_video_frames picks the frames (transformers'
// Glm5NextVideoProcessor sampling), and the picked ones come back as RGB8.
// Hostile bytes give a Status ("video: ..."), never a crash or a hang: sizes, frame counts and frame
// sizes are bounded by VideoLimits, probing is bounded, and a container can open nothing but the
// given bytes (no nested files or URLs: HLS, concat lists and the like fail).
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "media/image_decode.h"

namespace tf::media {

struct VideoLimits {
  int64_t max_bytes = 256 << 20;              // size of the encoded video
  int64_t max_frames_decoded = 100000;        // frames in the video (decoded in one pass)
  int64_t max_pixels_per_frame = 16LL << 20;  // width * height of any frame
  int64_t max_output_bytes = 4LL << 30;       // sum of the returned RGB frames
};

struct DecodedVideo {
  double fps = 0;                // the stream's average frame rate (else its base rate)
  double duration = 0;           // seconds: the stream's duration, else total_frames / fps
  int64_t total_frames = 0;      // frames the decoder outputs (the stream's frame count when the header
                                 // gives one and the decoder agrees)
  std::vector<int64_t> indices;  // sample_video_frames(total_frames, fps, duration, target_fps)
  std::vector<RgbImage> frames;  // the sampled frames only, in order (frames[i] is frame indices[i];
                                 // a repeated index repeats its frame); all of the first frame's size
};

// Decodes `bytes` and returns the frames sampled at target_fps (frame i of the stream is the i-th
// frame the decoder outputs, in presentation order). Frames whose size differs from the first frame
// are scaled to it. Packets the decoder rejects are skipped, as players do; a video with no decodable
// frame, no frame rate, or too short for one sampled frame is an error.
Expected<DecodedVideo> decode_video(std::string_view bytes, const VideoLimits& limits = {},
                                    double target_fps = 2.0);

}  // namespace tf::media
