// Video frame sampling (transformers' Glm5NextVideoProcessor.sample_frames) and FFmpeg decoding
// from memory. The expected indices were derived by hand from the Python (numpy linspace, Python
// float accumulation); the videos are encoded here, with FFmpeg, from known pixels.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "media/video_decode.h"
#include "media/video_sampling.h"

extern "C" {
#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <libavutil/frame.h>
#include <libavutil/opt.h>
#include <libswscale/swscale.h>
}

namespace tf::media {
namespace {

using Indices = std::vector<int64_t>;

// ---------------------------------------------------------------- sampling

TEST(VideoSampling, FixtureCase) {
  // tests/data/model/tiny-vision: 10 frames at 5 fps, duration 2.0 -> video_indices [0, 3, 5, 8].
  // Walk: i * 0.2 >= 0, 0.5, 1.0, 1.5 picks 0, 3 (0.6000000000000001), 5 (1.0), 8 (1.6); the mark
  // then reaches int(2.0) = 2 and the walk stops; 4 == extract_t = int(2.0 * 2).
  EXPECT_EQ(sample_video_frames(10, 5.0, 2.0), (Indices{0, 3, 5, 8}));
}

TEST(VideoSampling, FixtureMatchesReferenceJson) {
  std::ifstream in(std::string(TF_TEST_DATA_DIR) + "/model/tiny-vision/reference.json");
  ASSERT_TRUE(in.good());
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string text = ss.str();
  const size_t video = text.find("\"video\"");
  ASSERT_NE(video, std::string::npos);
  auto number_after = [&](const std::string& key) {
    const size_t k = text.find("\"" + key + "\"", video);
    EXPECT_NE(k, std::string::npos) << key;
    return std::stod(text.substr(text.find(':', k) + 1));
  };
  const auto frames = static_cast<int64_t>(number_after("frames"));
  const double fps = number_after("fps");
  size_t pos = text.find('[', text.find("\"indices\"", video)) + 1;
  const size_t end = text.find(']', pos);
  Indices expected;
  while (pos < end) {
    size_t used = 0;
    expected.push_back(std::stoll(text.substr(pos, end - pos), &used));
    pos = text.find_first_of("0123456789", pos + used);
    if (pos == std::string::npos) break;
  }
  // The fixture's metadata: duration = frames / fps.
  EXPECT_EQ(sample_video_frames(frames, fps, static_cast<double>(frames) / fps), expected);
  EXPECT_EQ(group_timestamps(expected, fps, 2), (std::vector<double>{0.0, 1.0}));
}

TEST(VideoSampling, UnknownDurationRoundsHalfToEven) {
  // duration = round(9 / 5) + 1 = 3: extract_t 6; the walk gives [0, 3, 5, 8] (frames end before the
  // 2.0 mark), too few -> linspace(0, 8, 6) = 0, 1.6, 3.2, 4.800000000000001, 6.4, 8.
  EXPECT_EQ(sample_video_frames(10, 5.0, 0.0), (Indices{0, 1, 3, 4, 6, 8}));
  // round(10 / 4 = 2.5) is 2 in Python (half to even): duration 3, extract_t 6, walk [0, 2, ..., 10]
  // stops at the 3.0 mark. Half-up rounding would give duration 4 and [0, 1, 2, 4, 5, 7, 8, 10].
  EXPECT_EQ(sample_video_frames(11, 4.0, 0.0), (Indices{0, 2, 4, 6, 8, 10}));
  // round(11 / 4 = 2.75) = 3: duration 4, extract_t 8, walk 6 frames, linspace(0, 10, 8).
  EXPECT_EQ(sample_video_frames(12, 4.0, -1.0), (Indices{0, 1, 2, 4, 5, 7, 8, 10}));
}

TEST(VideoSampling, ShortVideoUsesLinspaceAndPadsOdd) {
  // 3 frames, 3 s: extract_t 6 > 3 -> linspace(0, 2, 6) = 0, .4, .8, 1.2, 1.6, 2 -> [0,0,0,1,1,2],
  // deduplicated [0, 1, 2], odd -> the last repeated.
  EXPECT_EQ(sample_video_frames(3, 1.0, 3.0), (Indices{0, 1, 2, 2}));
  // 7 frames at 3 fps, unknown duration: round(2.0) + 1 = 3 s, target 2.5 -> extract_t 7 = total, the
  // walk (marks every 0.4 s) picks all seven before the 3.0 mark... and the count is odd.
  EXPECT_EQ(sample_video_frames(7, 3.0, 0.0, 2.5), (Indices{0, 1, 2, 3, 4, 5, 6, 6}));
}

TEST(VideoSampling, OddCountRepeatsLast) {
  // 5 frames at 1 fps, 5 s, target 1: the walk picks 0..4 (the mark reaches 5 at frame 4).
  EXPECT_EQ(sample_video_frames(5, 1.0, 5.0, 1.0), (Indices{0, 1, 2, 3, 4, 4}));
}

TEST(VideoSampling, HeaderLongerThanFramesFillsByLinspace) {
  // The header says 3 s, the frames last 2 s: extract_t 6, the walk finds [0, 3, 5, 8] and the frames
  // end; too few -> linspace(first 0, last 8, 6).
  EXPECT_EQ(sample_video_frames(10, 5.0, 3.0), (Indices{0, 1, 3, 4, 6, 8}));
}

TEST(VideoSampling, FloatMarksAccumulate) {
  // target 3 fps: marks 1/3 added up in doubles (0.333.., 0.666.., 1.0, 1.333.., 1.6666666666666665,
  // 1.9999999999999998, ..., 2.9999999999999996 < 3, so the walk never breaks); timestamps i * 0.1
  // (0.7000000000000001 >= 0.6666666666666666 picks 7). Nine picks = extract_t, odd -> 27 repeated.
  EXPECT_EQ(sample_video_frames(30, 10.0, 3.0, 3.0), (Indices{0, 4, 7, 10, 14, 17, 20, 24, 27, 27}));
  // NTSC rate, unknown duration: round(299 / 29.97) + 1 = 11 s, 22 frames.
  EXPECT_EQ(sample_video_frames(300, 29.97, 0.0),
            (Indices{0,   13,  27,  40,  54,  67,  81,  95,  108, 122, 135,
                     149, 162, 176, 190, 203, 217, 230, 244, 257, 271, 285}));
  EXPECT_EQ(sample_video_frames(100, 30000.0 / 1001.0, 100 * 1001.0 / 30000.0),
            (Indices{0, 15, 30, 45, 60, 75}));
}

TEST(VideoSampling, CapsByMaxFrames) {
  // 20 min at 30 fps: the walk picks 2400 frames > extract_t = min(2400, 2048) -> linspace(0, 35999,
  // 2048) with step 35999 / 2047 = 17.5857...
  const Indices long_video = sample_video_frames(36000, 30.0, 1200.0);
  ASSERT_EQ(long_video.size(), 2048u);
  EXPECT_EQ((Indices(long_video.begin(), long_video.begin() + 6)), (Indices{0, 17, 35, 52, 70, 87}));
  EXPECT_EQ((Indices(long_video.end() - 3, long_video.end())), (Indices{35963, 35981, 35999}));
  // A small cap: 20 walked frames > 8 -> linspace(0, 99, 8), step 14.142857...
  EXPECT_EQ(sample_video_frames(100, 10.0, 10.0, 2.0, 8), (Indices{0, 14, 28, 42, 56, 70, 84, 99}));
}

TEST(VideoSampling, MaxDurationCapsTheCountNotTheWalk) {
  // max_duration 3: extract_t = 6, but the walk runs to int(10) = 10 s (20 frames) -> linspace(0, 99, 6).
  EXPECT_EQ(sample_video_frames(100, 10.0, 10.0, 2.0, 2048, 3.0), (Indices{0, 19, 39, 59, 79, 99}));
}

TEST(VideoSampling, DegenerateInputs) {
  EXPECT_TRUE(sample_video_frames(1, 30.0, 1.0 / 30.0).empty());  // int(0.066) = 0 frames wanted
  EXPECT_TRUE(sample_video_frames(0, 30.0, 1.0).empty());
  EXPECT_TRUE(sample_video_frames(10, 0.0, 1.0).empty());
  EXPECT_TRUE(sample_video_frames(10, NAN, 1.0).empty());
  EXPECT_TRUE(sample_video_frames(10, 5.0, 2.0, 0.0).empty());
  // A single frame with a long header duration: linspace(0, 0, n) collapses to [0], padded to a pair.
  EXPECT_EQ(sample_video_frames(1, 1.0, 5.0), (Indices{0, 0}));
  // An absurd duration does not overflow: the count is capped at max_frames before any integer cast.
  EXPECT_EQ(sample_video_frames(4, 1.0, 1e300).size(), 4u);
}

TEST(VideoSampling, Linspace) {
  EXPECT_EQ(linspace_indices(0, 8, 6), (Indices{0, 1, 3, 4, 6, 8}));
  EXPECT_EQ(linspace_indices(3, 3, 4), (Indices{3, 3, 3, 3}));
  EXPECT_EQ(linspace_indices(5, 9, 1), (Indices{5}));
  EXPECT_TRUE(linspace_indices(0, 9, 0).empty());
  EXPECT_EQ(linspace_indices(0, 10, 4), (Indices{0, 3, 6, 10}));
}

TEST(VideoSampling, GroupTimestamps) {
  const Indices idx{0, 3, 5, 8};
  EXPECT_EQ(group_timestamps(idx, 5.0, 2), (std::vector<double>{0.0, 1.0}));
  EXPECT_EQ(group_timestamps(idx, 5.0, 3), (std::vector<double>{0.0, 1.0, 1.0}));  // last repeated
  EXPECT_EQ(group_timestamps(idx, 5.0, 1), (std::vector<double>{0.0}));
  EXPECT_EQ(group_timestamps(Indices{}, 5.0, 2), (std::vector<double>{0.0, 0.0}));
  EXPECT_EQ(group_timestamps(Indices{0, 0, 48, 48}, 0.0, 2), (std::vector<double>{0.0, 2.0}));  // fps 24
  const Indices ntsc{0, 13, 27, 40};
  const auto t = group_timestamps(ntsc, 29.97, 2);
  EXPECT_DOUBLE_EQ(t[1], 27 / 29.97);
}

// ---------------------------------------------------------------- decoding

// Frame k's RGB value at (y, x, channel c) in the lossless videos: distinct per frame, row, column and
// channel, so a wrong frame, a flip or a channel swap shows.
uint8_t pattern(int k, int y, int x, int c) { return static_cast<uint8_t>(10 * k + 40 * c + x + 2 * y); }

struct EncodeSpec {
  const char* muxer;
  const char* encoder;
  AVPixelFormat pix_fmt;
  int frames;
  int fps;
  int width = 64;
  int height = 48;
  int max_b_frames = 0;
};

// Encodes RGB frames (pixel(k, y, x, c)) into a file with FFmpeg and returns its bytes.
std::string encode_video(const EncodeSpec& spec, const std::function<uint8_t(int, int, int, int)>& pixel) {
  const std::string path =
      (std::filesystem::temp_directory_path() /
       ("tf_media_video_" + std::to_string(::getpid()) + "_" + spec.encoder + "." + spec.muxer))
          .string();
  AVFormatContext* oc = nullptr;
  EXPECT_GE(avformat_alloc_output_context2(&oc, nullptr, spec.muxer, path.c_str()), 0);
  const AVCodec* codec = avcodec_find_encoder_by_name(spec.encoder);
  EXPECT_NE(codec, nullptr) << spec.encoder;
  if (oc == nullptr || codec == nullptr) return "";
  AVStream* st = avformat_new_stream(oc, nullptr);
  AVCodecContext* enc = avcodec_alloc_context3(codec);
  enc->width = spec.width;
  enc->height = spec.height;
  enc->pix_fmt = spec.pix_fmt;
  enc->time_base = AVRational{1, spec.fps};
  enc->framerate = AVRational{spec.fps, 1};
  enc->gop_size = 6;
  enc->max_b_frames = spec.max_b_frames;
  enc->thread_count = 1;
  if (std::string(spec.encoder) == "mpeg4") {
    enc->flags |= AV_CODEC_FLAG_QSCALE;
    enc->global_quality = FF_QP2LAMBDA * 2;
  }
  if (oc->oformat->flags & AVFMT_GLOBALHEADER) enc->flags |= AV_CODEC_FLAG_GLOBAL_HEADER;
  EXPECT_GE(avcodec_open2(enc, codec, nullptr), 0);
  EXPECT_GE(avcodec_parameters_from_context(st->codecpar, enc), 0);
  st->time_base = enc->time_base;
  st->avg_frame_rate = enc->framerate;
  EXPECT_GE(avio_open(&oc->pb, path.c_str(), AVIO_FLAG_WRITE), 0);
  EXPECT_GE(avformat_write_header(oc, nullptr), 0);

  SwsContext* sws =
      sws_getContext(spec.width, spec.height, AV_PIX_FMT_RGB24, spec.width, spec.height, spec.pix_fmt,
                     SWS_BICUBIC | SWS_ACCURATE_RND | SWS_FULL_CHR_H_INP, nullptr, nullptr, nullptr);
  AVFrame* frame = av_frame_alloc();
  AVPacket* pkt = av_packet_alloc();
  auto write_packets = [&] {
    while (avcodec_receive_packet(enc, pkt) >= 0) {
      av_packet_rescale_ts(pkt, enc->time_base, st->time_base);
      pkt->stream_index = st->index;
      EXPECT_GE(av_interleaved_write_frame(oc, pkt), 0);
    }
  };
  std::vector<uint8_t> rgb(static_cast<size_t>(spec.width) * spec.height * 3);
  for (int k = 0; k < spec.frames; ++k) {
    for (int y = 0; y < spec.height; ++y)
      for (int x = 0; x < spec.width; ++x)
        for (int c = 0; c < 3; ++c)
          rgb[(static_cast<size_t>(y) * spec.width + x) * 3 + c] = pixel(k, y, x, c);
    frame->format = spec.pix_fmt;
    frame->width = spec.width;
    frame->height = spec.height;
    EXPECT_GE(av_frame_get_buffer(frame, 0), 0);
    const uint8_t* src[1] = {rgb.data()};
    const int src_stride[1] = {spec.width * 3};
    sws_scale(sws, src, src_stride, 0, spec.height, frame->data, frame->linesize);
    frame->pts = k;
    EXPECT_GE(avcodec_send_frame(enc, frame), 0);
    av_frame_unref(frame);
    write_packets();
  }
  avcodec_send_frame(enc, nullptr);
  write_packets();
  EXPECT_GE(av_write_trailer(oc), 0);
  avio_closep(&oc->pb);
  av_packet_free(&pkt);
  av_frame_free(&frame);
  sws_freeContext(sws);
  avcodec_free_context(&enc);
  avformat_free_context(oc);

  std::ifstream in(path, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::filesystem::remove(path);
  return bytes;
}

void expect_pattern(const DecodedVideo& v) {
  ASSERT_EQ(v.frames.size(), v.indices.size());
  for (size_t i = 0; i < v.frames.size(); ++i) {
    const RgbImage& im = v.frames[i];
    ASSERT_EQ(im.height, 48);
    ASSERT_EQ(im.width, 64);
    ASSERT_EQ(im.rgb.size(), 48u * 64u * 3u);
    const int k = static_cast<int>(v.indices[i]);
    int mismatches = 0;
    for (int y = 0; y < 48; ++y)
      for (int x = 0; x < 64; ++x)
        for (int c = 0; c < 3; ++c)
          mismatches += im.rgb[(static_cast<size_t>(y) * 64 + x) * 3 + c] != pattern(k, y, x, c);
    EXPECT_EQ(mismatches, 0) << "frame " << k;
  }
}

TEST(VideoDecode, LosslessMatroskaCountsFramesByDecoding) {
  // FFV1 (bgr0) in Matroska: no frame count in the header, so the decoder counts.
  const std::string bytes = encode_video({"matroska", "ffv1", AV_PIX_FMT_BGR0, 10, 5}, pattern);
  ASSERT_FALSE(bytes.empty());
  auto v = decode_video(bytes);
  ASSERT_TRUE(v.has_value()) << v.status().to_string();
  EXPECT_EQ(v->total_frames, 10);
  EXPECT_DOUBLE_EQ(v->fps, 5.0);
  EXPECT_DOUBLE_EQ(v->duration, 2.0);
  EXPECT_EQ(v->indices, (Indices{0, 3, 5, 8}));  // the fixture's case
  expect_pattern(*v);

  auto one_fps = decode_video(bytes, {}, 1.0);  // extract_t 2: frames at 0 s and 1 s
  ASSERT_TRUE(one_fps.has_value()) << one_fps.status().to_string();
  EXPECT_EQ(one_fps->indices, (Indices{0, 5}));
  expect_pattern(*one_fps);
}

TEST(VideoDecode, LosslessAviUsesHeaderCount) {
  // FFV-Huffyuv (rgb24) in AVI: 12 frames at 4 fps, the count in the header; 3 s -> 6 frames.
  const std::string bytes = encode_video({"avi", "ffvhuff", AV_PIX_FMT_RGB24, 12, 4}, pattern);
  auto v = decode_video(bytes);
  ASSERT_TRUE(v.has_value()) << v.status().to_string();
  EXPECT_EQ(v->total_frames, 12);
  EXPECT_DOUBLE_EQ(v->fps, 4.0);
  EXPECT_DOUBLE_EQ(v->duration, 3.0);
  EXPECT_EQ(v->indices, (Indices{0, 2, 4, 6, 8, 10}));
  expect_pattern(*v);
}

TEST(VideoDecode, GrayIsFullRange) {
  // Gray FFV1: gray values come back unchanged in all three channels (gray is full range).
  auto gray = [](int k, int y, int x, int) { return static_cast<uint8_t>(7 * k + 3 * x + y); };
  const std::string bytes = encode_video({"matroska", "ffv1", AV_PIX_FMT_GRAY8, 6, 2}, gray);
  auto v = decode_video(bytes);
  ASSERT_TRUE(v.has_value()) << v.status().to_string();
  EXPECT_EQ(v->indices, (Indices{0, 1, 2, 3, 4, 5}));
  ASSERT_EQ(v->frames.size(), 6u);
  int mismatches = 0;
  for (size_t i = 0; i < 6; ++i)
    for (int y = 0; y < 48; ++y)
      for (int x = 0; x < 64; ++x)
        for (int c = 0; c < 3; ++c)
          mismatches += v->frames[i].rgb[(static_cast<size_t>(y) * 64 + x) * 3 + c] !=
                        gray(static_cast<int>(i), y, x, c);
  EXPECT_EQ(mismatches, 0);
}

TEST(VideoDecode, Mpeg4WithBFramesInMp4) {
  // Lossy MPEG-4 Part 2 with B-frames in MP4 (frame count and duration in the header; frames come
  // out of the decoder reordered into presentation order). Flat frames, checked within a tolerance.
  auto flat = [](int k, int, int, int c) { return static_cast<uint8_t>(20 + 15 * k + (c == 1 ? 5 : 0)); };
  const std::string bytes = encode_video({"mp4", "mpeg4", AV_PIX_FMT_YUV420P, 12, 4, 64, 48, 2}, flat);
  auto v = decode_video(bytes);
  ASSERT_TRUE(v.has_value()) << v.status().to_string();
  EXPECT_EQ(v->total_frames, 12);
  EXPECT_DOUBLE_EQ(v->fps, 4.0);
  EXPECT_DOUBLE_EQ(v->duration, 3.0);
  EXPECT_EQ(v->indices, (Indices{0, 2, 4, 6, 8, 10}));
  ASSERT_EQ(v->frames.size(), 6u);
  for (size_t i = 0; i < 6; ++i) {
    const int k = static_cast<int>(v->indices[i]);
    for (int c = 0; c < 3; ++c) {
      double sum = 0;
      for (int p = 0; p < 64 * 48; ++p) sum += v->frames[i].rgb[static_cast<size_t>(p) * 3 + c];
      EXPECT_NEAR(sum / (64 * 48), flat(k, 0, 0, c), 3.0) << "frame " << k << " channel " << c;
    }
  }
}

TEST(VideoDecode, Limits) {
  const std::string bytes = encode_video({"matroska", "ffv1", AV_PIX_FMT_BGR0, 10, 5}, pattern);
  VideoLimits small_bytes;
  small_bytes.max_bytes = 100;
  EXPECT_EQ(decode_video(bytes, small_bytes).status().code(), StatusCode::kResourceExhausted);
  VideoLimits small_frames;
  small_frames.max_pixels_per_frame = 64 * 47;
  EXPECT_EQ(decode_video(bytes, small_frames).status().code(), StatusCode::kResourceExhausted);
  VideoLimits few_frames;
  few_frames.max_frames_decoded = 9;
  EXPECT_EQ(decode_video(bytes, few_frames).status().code(), StatusCode::kResourceExhausted);
  VideoLimits small_output;
  small_output.max_output_bytes = 3 * 64 * 48 * 3;  // three of the four frames
  EXPECT_EQ(decode_video(bytes, small_output).status().code(), StatusCode::kResourceExhausted);
  EXPECT_FALSE(decode_video(bytes, {}, 0.0).has_value());
  // Too short for one frame at the target rate: 10 frames at 5 fps sampled at 0.25 fps.
  auto too_short = decode_video(bytes, {}, 0.25);
  ASSERT_FALSE(too_short.has_value());
  EXPECT_NE(too_short.status().message().find("video:"), std::string::npos);
}

TEST(VideoDecode, GarbageIsAnError) {
  EXPECT_FALSE(decode_video("").has_value());
  EXPECT_FALSE(decode_video("hello, this is not a video").has_value());
  std::mt19937 rng(7);
  std::string noise(64 << 10, '\0');
  for (char& ch : noise) ch = static_cast<char>(rng());
  auto r = decode_video(noise);
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.status().message().rfind("video: ", 0), 0u) << r.status().message();
  // An image is not a video stream with a frame rate worth sampling... but must not crash either way.
  (void)decode_video(std::string("\x89PNG\r\n\x1a\n", 8) + std::string(100, '\0'));
}

TEST(VideoDecode, NestedResourcesDoNotOpen) {
  // Playlists and lists naming a real video on disk: the demuxer may open nothing but the given
  // bytes. The concat list names it relative to the working directory (the concat demuxer's safe
  // mode refuses absolute paths by itself), which FFmpeg would open without the protocol whitelist.
  const std::string video = encode_video({"avi", "ffvhuff", AV_PIX_FMT_RGB24, 12, 4}, pattern);
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("tf_media_nested_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  {
    std::ofstream out(dir / "clip.avi", std::ios::binary);
    out << video;
  }
  const std::filesystem::path cwd = std::filesystem::current_path();
  std::filesystem::current_path(dir);
  const std::string path = (dir / "clip.avi").string();
  const std::string hls = "#EXTM3U\n#EXT-X-VERSION:3\n#EXT-X-TARGETDURATION:3\n#EXTINF:3.0,\n" + path +
                          "\n#EXTINF:3.0,\nfile:" + path + "\n#EXT-X-ENDLIST\n";
  const bool hls_decoded = decode_video(hls).has_value();
  auto concat = decode_video("ffconcat version 1.0\nfile 'clip.avi'\n");
  std::filesystem::current_path(cwd);
  std::filesystem::remove_all(dir);
  EXPECT_FALSE(hls_decoded);
  ASSERT_FALSE(concat.has_value());
  EXPECT_EQ(concat.status().message().rfind("video: ", 0), 0u);
}

TEST(VideoDecode, TruncatedAndCorruptedNeverCrash) {
  for (const EncodeSpec& spec : {EncodeSpec{"matroska", "ffv1", AV_PIX_FMT_BGR0, 10, 5},
                                 EncodeSpec{"avi", "ffvhuff", AV_PIX_FMT_RGB24, 12, 4},
                                 EncodeSpec{"mp4", "mpeg4", AV_PIX_FMT_YUV420P, 12, 4, 64, 48, 2}}) {
    const std::string bytes = encode_video(spec, pattern);
    ASSERT_FALSE(bytes.empty());
    auto check = [&](const std::string& b) {
      auto v = decode_video(b);
      if (!v.has_value()) {
        EXPECT_EQ(v.status().message().rfind("video: ", 0), 0u) << v.status().message();
        return;
      }
      ASSERT_EQ(v->frames.size(), v->indices.size());
      ASSERT_FALSE(v->indices.empty());
      EXPECT_EQ(v->indices.size() % 2, 0u);
      EXPECT_LT(v->indices.back(), v->total_frames);
      for (const RgbImage& im : v->frames)
        EXPECT_EQ(im.rgb.size(), static_cast<size_t>(im.height * im.width * 3));
    };
    // Cuts: the header alone fails; a cut in the middle keeps the frames before it.
    for (size_t cut : {size_t{16}, size_t{200}, bytes.size() / 3, bytes.size() / 2, bytes.size() - 7}) {
      SCOPED_TRACE(std::string(spec.muxer) + " cut at " + std::to_string(cut));
      check(bytes.substr(0, cut));
    }
    EXPECT_FALSE(decode_video(bytes.substr(0, 16)).has_value());
    std::mt19937 rng(1234);
    for (int trial = 0; trial < 12; ++trial) {
      std::string bad = bytes;
      for (int flips = 0; flips < 8; ++flips) bad[rng() % bad.size()] = static_cast<char>(rng());
      SCOPED_TRACE(std::string(spec.muxer) + " corrupted trial " + std::to_string(trial));
      check(bad);
    }
  }
}

TEST(VideoDecode, HeaderCountLargerThanTheStream) {
  // An AVI whose headers promise 20 frames (strh dwLength, avih dwTotalFrames) but holds 12: the
  // sampling at the header's count (and its 5 s duration) asks for frames past the end; the count
  // is corrected to the 12 the decoder output and the frames sampled again from it.
  std::string bytes = encode_video({"avi", "ffvhuff", AV_PIX_FMT_RGB24, 12, 4}, pattern);
  auto put_u32 = [&](size_t at, uint32_t v) {
    ASSERT_LE(at + 4, bytes.size());
    for (int i = 0; i < 4; ++i) bytes[at + i] = static_cast<char>(v >> (8 * i));
  };
  const size_t strh = bytes.find("strh"), avih = bytes.find("avih");
  ASSERT_NE(strh, std::string::npos);
  ASSERT_NE(avih, std::string::npos);
  put_u32(strh + 8 + 32, 20);
  put_u32(avih + 8 + 16, 20);
  auto v = decode_video(bytes);
  ASSERT_TRUE(v.has_value()) << v.status().to_string();
  EXPECT_EQ(v->total_frames, 12);
  EXPECT_DOUBLE_EQ(v->duration, 5.0);
  // sample_video_frames(12, 4, 5.0): extract_t 10, the walk finds 6 -> linspace(0, 10, 10).
  EXPECT_EQ(v->indices, (Indices{0, 1, 2, 3, 4, 5, 6, 7, 8, 10}));
  expect_pattern(*v);
}

TEST(VideoDecode, TruncatedKeepsTheFramesBeforeTheCut) {
  // Cut in the middle (the AVI index at the end is gone): what is there decodes.
  const std::string bytes = encode_video({"avi", "ffvhuff", AV_PIX_FMT_RGB24, 12, 4}, pattern);
  auto v = decode_video(bytes.substr(0, bytes.size() / 2));
  ASSERT_TRUE(v.has_value()) << v.status().to_string();
  EXPECT_EQ(v->indices, sample_video_frames(v->total_frames, v->fps, v->duration));
  expect_pattern(*v);
}

}  // namespace
}  // namespace tf::media
