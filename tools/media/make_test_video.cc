// make_test_video: writes the small committed test clip tests/data/media/clip_64x48_12f_6fps.mp4.
//
//   make_test_video OUTPUT.mp4
//
// 12 frames of 64x48 at 6 fps (2 seconds), MPEG-4 Part 2 (FFmpeg's native mpeg4 encoder) in MP4,
// yuv420p, intra frame every 6 frames, no B-frames, fixed quantizer 2 (clean content). Frame k is a
// smooth diagonal luma gradient whose brightness rises with k (8 levels a frame) over a gentle chroma
// gradient, so every frame differs from the others.
// The output is deterministic: single-threaded encoding, bit-exact encoder and muxer (no library
// version strings), no creation time or other metadata, so rerunning gives the same bytes (with the
// same FFmpeg version).
// Standalone: links only libavformat, libavcodec and libavutil.

#include <cstdio>
#include <cstdlib>
#include <string>

extern "C" {
#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <libavutil/error.h>
#include <libavutil/frame.h>
#include <libavutil/log.h>
}

namespace {

constexpr int kWidth = 64;
constexpr int kHeight = 48;
constexpr int kFrames = 12;
constexpr int kFps = 6;
constexpr int kGopSize = 6;
constexpr int kQscale = 2;

std::string av_error_text(int err) {
  char buf[AV_ERROR_MAX_STRING_SIZE] = {};
  av_strerror(err, buf, sizeof(buf));
  return buf;
}

[[noreturn]] void fail(const std::string& what, int err) {
  std::fprintf(stderr, "make_test_video: %s: %s\n", what.c_str(), av_error_text(err).c_str());
  std::exit(1);
}

void check(int r, const char* what) {
  if (r < 0) fail(what, r);
}

// Frame k's planes: luma 24 + 8k + x + y (24..222, inside the limited range 16..235);
// chroma 128 + (cx - 16) for Cb and 128 + (cy - 12) for Cr (112..143 and 116..139).
void fill_frame(AVFrame* frame, int k) {
  for (int y = 0; y < kHeight; ++y) {
    uint8_t* row = frame->data[0] + static_cast<ptrdiff_t>(y) * frame->linesize[0];
    for (int x = 0; x < kWidth; ++x) row[x] = static_cast<uint8_t>(24 + 8 * k + x + y);
  }
  for (int cy = 0; cy < kHeight / 2; ++cy) {
    uint8_t* cb = frame->data[1] + static_cast<ptrdiff_t>(cy) * frame->linesize[1];
    uint8_t* cr = frame->data[2] + static_cast<ptrdiff_t>(cy) * frame->linesize[2];
    for (int cx = 0; cx < kWidth / 2; ++cx) {
      cb[cx] = static_cast<uint8_t>(128 + (cx - 16));
      cr[cx] = static_cast<uint8_t>(128 + (cy - 12));
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s OUTPUT.mp4\n", argv[0]);
    return 2;
  }
  const char* path = argv[1];
  av_log_set_level(AV_LOG_ERROR);

  AVFormatContext* oc = nullptr;
  check(avformat_alloc_output_context2(&oc, nullptr, "mp4", path), "allocating the mp4 muxer");
  oc->flags |= AVFMT_FLAG_BITEXACT;

  const AVCodec* codec = avcodec_find_encoder_by_name("mpeg4");
  if (codec == nullptr) fail("finding the mpeg4 encoder", AVERROR_ENCODER_NOT_FOUND);
  AVStream* st = avformat_new_stream(oc, nullptr);
  if (st == nullptr) fail("adding the video stream", AVERROR(ENOMEM));
  AVCodecContext* enc = avcodec_alloc_context3(codec);
  if (enc == nullptr) fail("allocating the encoder", AVERROR(ENOMEM));
  enc->width = kWidth;
  enc->height = kHeight;
  enc->pix_fmt = AV_PIX_FMT_YUV420P;
  enc->time_base = AVRational{1, kFps};
  enc->framerate = AVRational{kFps, 1};
  enc->gop_size = kGopSize;
  enc->max_b_frames = 0;
  enc->thread_count = 1;
  enc->flags |= AV_CODEC_FLAG_QSCALE | AV_CODEC_FLAG_BITEXACT;
  enc->global_quality = FF_QP2LAMBDA * kQscale;
  if (oc->oformat->flags & AVFMT_GLOBALHEADER) enc->flags |= AV_CODEC_FLAG_GLOBAL_HEADER;
  check(avcodec_open2(enc, codec, nullptr), "opening the mpeg4 encoder");
  check(avcodec_parameters_from_context(st->codecpar, enc), "copying the encoder parameters");
  st->time_base = enc->time_base;
  st->avg_frame_rate = enc->framerate;

  check(avio_open(&oc->pb, path, AVIO_FLAG_WRITE), (std::string("opening ") + path).c_str());
  check(avformat_write_header(oc, nullptr), "writing the mp4 header");

  AVFrame* frame = av_frame_alloc();
  AVPacket* pkt = av_packet_alloc();
  if (frame == nullptr || pkt == nullptr) fail("allocating a frame", AVERROR(ENOMEM));
  auto write_packets = [&] {
    for (;;) {
      const int r = avcodec_receive_packet(enc, pkt);
      if (r == AVERROR(EAGAIN) || r == AVERROR_EOF) return;
      check(r, "encoding a frame");
      pkt->duration = 1;  // one frame, in the encoder's time base
      av_packet_rescale_ts(pkt, enc->time_base, st->time_base);
      pkt->stream_index = st->index;
      check(av_interleaved_write_frame(oc, pkt), "writing a packet");
    }
  };
  for (int k = 0; k < kFrames; ++k) {
    frame->format = enc->pix_fmt;
    frame->width = kWidth;
    frame->height = kHeight;
    check(av_frame_get_buffer(frame, 0), "allocating a frame buffer");
    fill_frame(frame, k);
    frame->pts = k;
    check(avcodec_send_frame(enc, frame), "sending a frame to the encoder");
    av_frame_unref(frame);
    write_packets();
  }
  check(avcodec_send_frame(enc, nullptr), "flushing the encoder");
  write_packets();
  check(av_write_trailer(oc), "writing the mp4 trailer");
  check(avio_closep(&oc->pb), "closing the output");

  av_packet_free(&pkt);
  av_frame_free(&frame);
  avcodec_free_context(&enc);
  avformat_free_context(oc);
  return 0;
}
