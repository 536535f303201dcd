// decode_video in a build without FFmpeg (TF_VIDEO=OFF): every video is refused, saying why.
#include "media/video_decode.h"

namespace tf::media {

Expected<DecodedVideo> decode_video(std::string_view /*bytes*/, const VideoLimits& /*limits*/, double /*target_fps*/) {
  return unimplemented("video: this tensorfold was built without FFmpeg (TF_VIDEO=OFF): videos are not supported");
}

}  // namespace tf::media
