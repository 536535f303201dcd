// Which frames of a video the model sees, and the timestamp of each temporal group.
// A transcription of transformers' Glm5NextVideoProcessor.sample_frames and of the processor's
// per-group timestamps (spec glm5-flash.md §6.4), with numpy's linspace and Python's float
// arithmetic reproduced step by step so that the indices are the reference's, bit for bit.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace tf::media {

// The frame indices to decode, in order, without duplicates, always an even count (the last one is
// repeated when the count is odd: the model consumes frames in pairs).
//   total_frames: frames in the video; source_fps: its frame rate; duration: seconds, <= 0 (or not
//   finite) when unknown (then round((total_frames - 1) / source_fps) + 1, as the reference does);
//   target_fps: frames to take per second; max_frames: cap on the count before the odd-count repeat;
//   max_duration: > 0 caps the duration used for the count (not the walk's stop second).
// Returns an empty list where the reference would raise or produce nothing: total_frames <= 0,
// source_fps or target_fps not positive and finite, or a target count of 0 (a video shorter than
// one target frame period).
std::vector<int64_t> sample_video_frames(int64_t total_frames, double source_fps, double duration,
                                         double target_fps = 2.0, int64_t max_frames = 2048,
                                         double max_duration = 0);

// The timestamp (seconds) of each of `groups` temporal groups: frame_index / fps of the first frame of
// each pair of `indices` (the reference's timestamps[::2]); when the indices run out the last
// timestamp is repeated (0 when there is none). fps <= 0 means unknown and counts as 24, as in the
// reference. The prompt shows each as "{t:.1f} seconds".
std::vector<double> group_timestamps(std::span<const int64_t> indices, double source_fps, int64_t groups);

// numpy.linspace(start, stop, num, dtype=int): the same float arithmetic (start + i * step with
// step = (stop - start) / (num - 1), the last element exactly stop), then floor (numpy >= 2 floors
// integer linspace; for the non-negative values used here that equals truncation).
std::vector<int64_t> linspace_indices(double start, double stop, int64_t num);

}  // namespace tf::media
