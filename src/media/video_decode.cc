#include "media/video_decode.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <cstdarg>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <mutex>
#include <string>

#include "media/video_sampling.h"

extern "C" {
#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <libavutil/avutil.h>
#include <libavutil/dict.h>
#include <libavutil/error.h>
#include <libavutil/frame.h>
#include <libavutil/pixdesc.h>
#include <libswscale/swscale.h>
}

namespace tf::media {
namespace {

std::string av_error_text(int err) {
  char buf[AV_ERROR_MAX_STRING_SIZE] = {};
  av_strerror(err, buf, sizeof(buf));
  return buf;
}

// An FFmpeg failure: running out of memory is ours, anything else is the video's fault.
Status av_status(const std::string& what, int err) {
  std::string message = "video: " + what + ": " + av_error_text(err);
  return err == AVERROR(ENOMEM) ? resource_exhausted(std::move(message))
                                : invalid_argument(std::move(message));
}

// FFmpeg logs through spdlog at debug level (hostile uploads would otherwise fill stderr with decoder
// complaints; the error that matters comes back as a Status). Process-wide, set once.
void ffmpeg_log(void* avcl, int level, const char* fmt, va_list args) {
  if (level > AV_LOG_WARNING || !spdlog::should_log(spdlog::level::debug)) return;
  char line[1024];
  int print_prefix = 1;
  av_log_format_line2(avcl, level, fmt, args, line, sizeof(line), &print_prefix);
  std::string text(line);
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r')) text.pop_back();
  if (!text.empty()) spdlog::debug("ffmpeg: {}", text);
}

void init_ffmpeg_logging() {
  static std::once_flag once;
  std::call_once(once, [] { av_log_set_callback(&ffmpeg_log); });
}

struct FrameDeleter {
  void operator()(AVFrame* f) const { av_frame_free(&f); }
};
struct PacketDeleter {
  void operator()(AVPacket* p) const { av_packet_free(&p); }
};
struct CodecContextDeleter {
  void operator()(AVCodecContext* c) const { avcodec_free_context(&c); }
};
struct SwsDeleter {
  void operator()(SwsContext* s) const { sws_freeContext(s); }
};
using FramePtr = std::unique_ptr<AVFrame, FrameDeleter>;
using PacketPtr = std::unique_ptr<AVPacket, PacketDeleter>;
using CodecContextPtr = std::unique_ptr<AVCodecContext, CodecContextDeleter>;
using SwsPtr = std::unique_ptr<SwsContext, SwsDeleter>;

// The encoded bytes as FFmpeg's input. Reads are capped in total: a container whose index sends the
// demuxer over the same bytes again and again (legal in mp4: every sample may point at one chunk)
// stops with an error instead of spinning.
struct MemoryInput {
  const uint8_t* data = nullptr;
  int64_t size = 0;
  int64_t pos = 0;
  int64_t bytes_read = 0;
  int64_t read_budget = 0;
  bool over_budget = false;
};

int memory_read(void* opaque, uint8_t* buf, int buf_size) {
  auto* in = static_cast<MemoryInput*>(opaque);
  if (buf_size <= 0) return 0;
  if (in->pos >= in->size) return AVERROR_EOF;
  const int64_t n = std::min<int64_t>(buf_size, in->size - in->pos);
  if (in->bytes_read + n > in->read_budget) {
    in->over_budget = true;
    return AVERROR(EIO);
  }
  std::memcpy(buf, in->data + in->pos, static_cast<size_t>(n));
  in->pos += n;
  in->bytes_read += n;
  return static_cast<int>(n);
}

int64_t memory_seek(void* opaque, int64_t offset, int whence) {
  auto* in = static_cast<MemoryInput*>(opaque);
  whence &= ~AVSEEK_FORCE;
  if (whence == AVSEEK_SIZE) return in->size;
  int64_t base;
  switch (whence) {
    case SEEK_SET:
      base = 0;
      break;
    case SEEK_CUR:
      base = in->pos;
      break;
    case SEEK_END:
      base = in->size;
      break;
    default:
      return AVERROR(EINVAL);
  }
  int64_t target;
  if (__builtin_add_overflow(base, offset, &target) || target < 0) return AVERROR(EINVAL);
  in->pos = target;  // past the end is allowed: reads there return EOF
  return target;
}

// Containers that name other files or URLs (HLS playlists, concat lists, DASH manifests, mov
// references) must not reach the file system or the network: nothing but the given bytes opens
// (this callback, and an empty protocol whitelist for demuxers that open nested inputs themselves).
int deny_io_open(AVFormatContext*, AVIOContext**, const char*, int, AVDictionary**) { return AVERROR(EPERM); }

// What the stream header says, read once when the video is opened.
struct StreamInfo {
  double fps = 0;
  double header_duration = 0;  // 0 when the stream has none
  int64_t header_frames = 0;   // 0 when the stream has no count
};

// One pass over the video: demuxer over the bytes plus a decoder for the best video stream.
// Not movable (FFmpeg holds a pointer to `input_`); every FFmpeg object is freed in the destructor.
class VideoPass {
 public:
  VideoPass() = default;
  VideoPass(const VideoPass&) = delete;
  VideoPass& operator=(const VideoPass&) = delete;
  ~VideoPass() {
    decoder_.reset();
    if (format_ != nullptr) avformat_close_input(&format_);  // does not free a custom AVIOContext
    if (avio_ != nullptr) {
      av_freep(&avio_->buffer);  // FFmpeg may have replaced the buffer we gave it
      avio_context_free(&avio_);
    }
  }

  static Expected<std::unique_ptr<VideoPass>> open(std::string_view bytes, const VideoLimits& limits) {
    auto pass = std::make_unique<VideoPass>();
    TF_RETURN_IF_ERROR(pass->open_impl(bytes, limits));
    return pass;
  }

  const StreamInfo& info() const { return info_; }

  // Decodes from the start and calls on_frame(index, frame) for every frame the decoder outputs, in
  // order, until the stream ends or on_frame sets *stop. Returns the number of frames seen.
  Expected<int64_t> run(const std::function<Status(int64_t, const AVFrame&, bool*)>& on_frame) {
    PacketPtr packet(av_packet_alloc());
    FramePtr frame(av_frame_alloc());
    if (!packet || !frame) return resource_exhausted("video: out of memory allocating a frame");
    int64_t frames = 0;
    int64_t packets = 0;
    // Frames and packets both bounded: a stream whose packets all fail to decode still ends.
    const int64_t max_packets = limits_.max_frames_decoded > (int64_t{1} << 40)
                                    ? int64_t{1} << 44
                                    : 16 * limits_.max_frames_decoded + 100000;
    bool stop = false;

    auto drain = [&]() -> Status {
      int errors = 0;
      while (!stop) {
        const int r = avcodec_receive_frame(decoder_.get(), frame.get());
        if (r == AVERROR(EAGAIN) || r == AVERROR_EOF) return Status::ok();
        if (r == AVERROR(ENOMEM)) return av_status("decoding a frame", r);
        if (r < 0) {  // a broken frame: skipped, as players do (a bounded number in a row)
          if (++errors > 64) return Status::ok();
          continue;
        }
        if (frames >= limits_.max_frames_decoded) {
          return resource_exhausted("video: more than " + std::to_string(limits_.max_frames_decoded) +
                                    " frames (VideoLimits::max_frames_decoded)");
        }
        TF_RETURN_IF_ERROR(check_frame(*frame));
        Status s = on_frame(frames, *frame, &stop);
        av_frame_unref(frame.get());
        ++frames;
        TF_RETURN_IF_ERROR(s);
      }
      return Status::ok();
    };

    while (!stop) {
      const int r = av_read_frame(format_, packet.get());
      if (r == AVERROR(ENOMEM)) return av_status("reading a packet", r);
      if (r < 0) break;  // end of the stream, or a truncated or corrupt tail: what was read is kept
      if (++packets > max_packets) {
        av_packet_unref(packet.get());
        return invalid_argument("video: more than " + std::to_string(max_packets) + " packets");
      }
      if (packet->stream_index != stream_index_) {
        av_packet_unref(packet.get());
        continue;
      }
      int s = avcodec_send_packet(decoder_.get(), packet.get());
      if (s == AVERROR(EAGAIN)) {  // the decoder wants its output taken first
        Status d = drain();
        if (!d.is_ok()) {
          av_packet_unref(packet.get());
          return d;
        }
        s = stop ? 0 : avcodec_send_packet(decoder_.get(), packet.get());
      }
      av_packet_unref(packet.get());
      if (s == AVERROR(ENOMEM)) return av_status("decoding a packet", s);
      // Any other error: a packet the decoder rejects is skipped, as players do.
      TF_RETURN_IF_ERROR(drain());
    }
    if (input_.over_budget) {
      return invalid_argument("video: the container reads its " + std::to_string(input_.size) +
                              " bytes over and over (read more than " + std::to_string(input_.read_budget) +
                              " bytes)");
    }
    if (!stop) {
      const int s = avcodec_send_packet(decoder_.get(), nullptr);  // flush the frames still held
      if (s == AVERROR(ENOMEM)) return av_status("flushing the decoder", s);
      TF_RETURN_IF_ERROR(drain());  // (a decoder may report a broken last packet here: skipped too)
    }
    return frames;
  }

 private:
  Status check_frame(const AVFrame& f) const {
    if (f.width <= 0 || f.height <= 0 || f.format < 0)
      return invalid_argument("video: a decoded frame has no size");
    if (static_cast<int64_t>(f.width) * f.height > limits_.max_pixels_per_frame) {
      return resource_exhausted(
          "video: a frame of " + std::to_string(f.width) + "x" + std::to_string(f.height) + " exceeds " +
          std::to_string(limits_.max_pixels_per_frame) + " pixels (VideoLimits::max_pixels_per_frame)");
    }
    return Status::ok();
  }

  Status open_impl(std::string_view bytes, const VideoLimits& limits) {
    limits_ = limits;
    input_.data = reinterpret_cast<const uint8_t*>(bytes.data());
    input_.size = static_cast<int64_t>(bytes.size());
    input_.read_budget = 8 * input_.size + (256 << 20);

    constexpr int kBufferSize = 64 << 10;
    auto* buffer = static_cast<uint8_t*>(av_malloc(kBufferSize));
    if (buffer == nullptr) return resource_exhausted("video: out of memory");
    avio_ = avio_alloc_context(buffer, kBufferSize, /*write_flag=*/0, &input_, &memory_read, nullptr,
                               &memory_seek);
    if (avio_ == nullptr) {
      av_free(buffer);
      return resource_exhausted("video: out of memory");
    }
    format_ = avformat_alloc_context();
    if (format_ == nullptr) return resource_exhausted("video: out of memory");
    format_->pb = avio_;
    format_->flags |= AVFMT_FLAG_CUSTOM_IO;
    format_->io_open = &deny_io_open;
    format_->probesize = 16 << 20;                      // bytes read to find the streams
    format_->max_analyze_duration = 10 * AV_TIME_BASE;  // stream time analysed for them
    // Nested opens (the concat demuxer opens its list's files itself) check the protocol whitelist:
    // one that names no protocol lets none open.
    AVDictionary* options = nullptr;
    av_dict_set(&options, "protocol_whitelist", "none", 0);
    int r = avformat_open_input(&format_, nullptr, nullptr, &options);  // frees and nulls format_ on failure
    av_dict_free(&options);
    if (r < 0) return av_status("not a video container FFmpeg reads", r);
    r = avformat_find_stream_info(format_, nullptr);
    if (r < 0) return av_status("reading the stream headers", r);

    const AVCodec* codec = nullptr;
    r = av_find_best_stream(format_, AVMEDIA_TYPE_VIDEO, -1, -1, &codec, 0);
    if (r == AVERROR_DECODER_NOT_FOUND)
      return invalid_argument("video: no decoder for the video stream's codec");
    if (r < 0 || codec == nullptr) return invalid_argument("video: no video stream");
    stream_index_ = r;
    const AVStream* stream = format_->streams[stream_index_];
    if (stream->disposition & AV_DISPOSITION_ATTACHED_PIC) {
      return invalid_argument("video: the only video stream is a still picture (cover art)");
    }
    const AVCodecParameters* par = stream->codecpar;
    if (static_cast<int64_t>(par->width) * par->height > limits_.max_pixels_per_frame) {
      return resource_exhausted(
          "video: frames of " + std::to_string(par->width) + "x" + std::to_string(par->height) + " exceed " +
          std::to_string(limits_.max_pixels_per_frame) + " pixels (VideoLimits::max_pixels_per_frame)");
    }

    AVRational rate = stream->avg_frame_rate;
    if (rate.num <= 0 || rate.den <= 0) rate = stream->r_frame_rate;
    info_.fps = rate.num > 0 && rate.den > 0 ? av_q2d(rate) : 0.0;
    if (!(info_.fps > 0) || !std::isfinite(info_.fps))
      return invalid_argument("video: the stream has no frame rate");
    if (stream->duration != AV_NOPTS_VALUE && stream->duration > 0 && stream->time_base.num > 0 &&
        stream->time_base.den > 0) {
      const double seconds = static_cast<double>(stream->duration) * av_q2d(stream->time_base);
      if (std::isfinite(seconds) && seconds > 0) info_.header_duration = seconds;
    }
    info_.header_frames = stream->nb_frames > 0 ? stream->nb_frames : 0;

    decoder_.reset(avcodec_alloc_context3(codec));
    if (!decoder_) return resource_exhausted("video: out of memory");
    r = avcodec_parameters_to_context(decoder_.get(), par);
    if (r < 0) return av_status("configuring the decoder", r);
    decoder_->pkt_timebase = stream->time_base;
    decoder_->max_pixels = limits_.max_pixels_per_frame;  // the decoder refuses larger frames itself
    decoder_->thread_count = 0;                           // FFmpeg picks (at most 16)
    r = avcodec_open2(decoder_.get(), codec, nullptr);
    if (r < 0) return av_status(std::string("opening the ") + codec->name + " decoder", r);
    return Status::ok();
  }

  VideoLimits limits_;
  MemoryInput input_;
  AVIOContext* avio_ = nullptr;
  AVFormatContext* format_ = nullptr;
  CodecContextPtr decoder_;
  int stream_index_ = -1;
  StreamInfo info_;
};

// Decoded frames to RGB24 with libswscale: the frame's own matrix (BT.601 when unspecified) and range
// (full for JPEG-range YUV and gray, limited otherwise unless the frame says so), accurate rounding
// and full chroma interpolation; bit-exact so that every machine gives the same pixels.
class RgbConverter {
 public:
  Status convert(const AVFrame& f, int out_width, int out_height, RgbImage* out) {
    auto format = static_cast<AVPixelFormat>(f.format);
    bool full_range = f.color_range == AVCOL_RANGE_JPEG;
    switch (format) {  // the deprecated JPEG-range formats: same planes, range said separately
      case AV_PIX_FMT_YUVJ420P:
        format = AV_PIX_FMT_YUV420P;
        full_range = true;
        break;
      case AV_PIX_FMT_YUVJ422P:
        format = AV_PIX_FMT_YUV422P;
        full_range = true;
        break;
      case AV_PIX_FMT_YUVJ444P:
        format = AV_PIX_FMT_YUV444P;
        full_range = true;
        break;
      case AV_PIX_FMT_YUVJ440P:
        format = AV_PIX_FMT_YUV440P;
        full_range = true;
        break;
      case AV_PIX_FMT_YUVJ411P:
        format = AV_PIX_FMT_YUV411P;
        full_range = true;
        break;
      default:
        break;
    }
    const AVPixFmtDescriptor* desc = av_pix_fmt_desc_get(format);
    if (desc == nullptr || (desc->flags & AV_PIX_FMT_FLAG_HWACCEL) || !sws_isSupportedInput(format)) {
      const char* name = av_get_pix_fmt_name(format);
      return unimplemented(std::string("video: pixel format ") + (name ? name : "?") +
                           " cannot be converted to RGB");
    }
    const bool gray = desc->nb_components <= 2 && !(desc->flags & AV_PIX_FMT_FLAG_RGB) &&
                      !(desc->flags & AV_PIX_FMT_FLAG_PAL);
    if (gray && f.color_range == AVCOL_RANGE_UNSPECIFIED)
      full_range = true;  // swscale's own default for gray

    constexpr int kFlags =
        SWS_BICUBIC | SWS_ACCURATE_RND | SWS_BITEXACT | SWS_FULL_CHR_H_INT | SWS_FULL_CHR_H_INP;
    SwsContext* ctx = sws_getCachedContext(sws_.release(), f.width, f.height, format, out_width, out_height,
                                           AV_PIX_FMT_RGB24, kFlags, nullptr, nullptr, nullptr);
    sws_.reset(ctx);
    if (!sws_) return invalid_argument("video: no RGB conversion for a frame's pixel format and size");
    const int* coefficients =
        sws_getCoefficients(f.colorspace == AVCOL_SPC_UNSPECIFIED ? SWS_CS_DEFAULT : f.colorspace);
    sws_setColorspaceDetails(sws_.get(), coefficients, full_range ? 1 : 0, coefficients, /*dstRange=*/1,
                             /*brightness=*/0, /*contrast=*/1 << 16, /*saturation=*/1 << 16);

    // Into an FFmpeg-allocated (aligned, padded) buffer, then row by row into the image.
    if (!scratch_ || scratch_->width != out_width || scratch_->height != out_height) {
      scratch_.reset(av_frame_alloc());
      if (!scratch_) return resource_exhausted("video: out of memory");
      scratch_->format = AV_PIX_FMT_RGB24;
      scratch_->width = out_width;
      scratch_->height = out_height;
      const int r = av_frame_get_buffer(scratch_.get(), 0);
      if (r < 0) return av_status("allocating an RGB frame", r);
    }
    const int rows =
        sws_scale(sws_.get(), f.data, f.linesize, 0, f.height, scratch_->data, scratch_->linesize);
    if (rows != out_height) return invalid_argument("video: converting a frame to RGB failed");

    out->height = out_height;
    out->width = out_width;
    const size_t row_bytes = static_cast<size_t>(out_width) * 3;
    out->rgb.resize(row_bytes * static_cast<size_t>(out_height));
    for (int y = 0; y < out_height; ++y) {
      std::memcpy(out->rgb.data() + row_bytes * static_cast<size_t>(y),
                  scratch_->data[0] + static_cast<ptrdiff_t>(y) * scratch_->linesize[0], row_bytes);
    }
    return Status::ok();
  }

 private:
  SwsPtr sws_;
  FramePtr scratch_;
};

}  // namespace

Expected<DecodedVideo> decode_video(std::string_view bytes, const VideoLimits& limits, double target_fps) {
  init_ffmpeg_logging();
  if (bytes.empty()) return invalid_argument("video: no bytes");
  if (static_cast<int64_t>(bytes.size()) > limits.max_bytes) {
    return resource_exhausted("video: " + std::to_string(bytes.size()) + " bytes exceed " +
                              std::to_string(limits.max_bytes) + " (VideoLimits::max_bytes)");
  }
  if (!(target_fps > 0) || !std::isfinite(target_fps)) {
    return invalid_argument("video: target fps must be positive, got " + std::to_string(target_fps));
  }

  TF_ASSIGN_OR_RETURN(auto pass, VideoPass::open(bytes, limits));
  const StreamInfo info = pass->info();
  DecodedVideo out;
  out.fps = info.fps;
  // The header's count when it has one within the limit; otherwise count by decoding (a count past the
  // limit may be a corrupt header: the decoding pass enforces the limit on the frames really there).
  int64_t total = info.header_frames <= limits.max_frames_decoded ? info.header_frames : 0;
  if (total <= 0) {
    TF_ASSIGN_OR_RETURN(total, pass->run([](int64_t, const AVFrame&, bool*) { return Status::ok(); }));
    if (total <= 0) return invalid_argument("video: no decodable frame");
    TF_ASSIGN_OR_RETURN(pass, VideoPass::open(bytes, limits));
  }

  // At most two decoding passes: a header count the decoder does not reach is corrected to the
  // frames it did output, and the frames are sampled again from that count.
  for (int attempt = 0; attempt < 2; ++attempt) {
    out.total_frames = total;
    out.duration = info.header_duration > 0 ? info.header_duration : static_cast<double>(total) / info.fps;
    out.indices = sample_video_frames(total, info.fps, out.duration, target_fps);
    out.frames.clear();
    if (out.indices.empty()) {
      return invalid_argument(
          fmt::format("video: too short to sample ({:g} s at {:g} frames per second gives no frame)",
                      out.duration, target_fps));
    }
    RgbConverter converter;
    size_t next = 0;
    int out_width = 0, out_height = 0;
    int64_t output_bytes = 0;
    auto on_frame = [&](int64_t index, const AVFrame& frame, bool* stop) -> Status {
      if (index != out.indices[next]) return Status::ok();
      if (out.frames.empty()) {  // frame 0: always the first sampled one; it sets the output size
        out_width = frame.width;
        out_height = frame.height;
      }
      RgbImage image;
      TF_RETURN_IF_ERROR(converter.convert(frame, out_width, out_height, &image));
      for (; next < out.indices.size() && out.indices[next] == index; ++next) {
        output_bytes += static_cast<int64_t>(image.rgb.size());
        if (output_bytes > limits.max_output_bytes) {
          return resource_exhausted("video: " + std::to_string(out.indices.size()) + " sampled frames of " +
                                    std::to_string(out_width) + "x" + std::to_string(out_height) +
                                    " exceed " + std::to_string(limits.max_output_bytes) +
                                    " bytes of RGB (VideoLimits::max_output_bytes)");
        }
        out.frames.push_back(image);
      }
      *stop = next == out.indices.size();
      return Status::ok();
    };
    TF_ASSIGN_OR_RETURN(const int64_t seen, pass->run(on_frame));
    if (out.frames.size() == out.indices.size()) return out;
    if (seen <= 0) return invalid_argument("video: no decodable frame");
    if (attempt == 1 || seen >= total) {
      return internal_error("video: the decoder output " + std::to_string(seen) +
                            " frames, then fewer on a second pass");
    }
    total = seen;  // the header promised more frames than the stream has
    TF_ASSIGN_OR_RETURN(pass, VideoPass::open(bytes, limits));
  }
  return internal_error("video: unreachable");
}

}  // namespace tf::media
