# Video sources and libraries of tf_media: FFmpeg (Debian's libav*) decodes from memory,
# libswscale converts the sampled frames to RGB.
pkg_check_modules(TF_FFMPEG REQUIRED IMPORTED_TARGET libavformat libavcodec libavutil libswscale)
list(APPEND TF_MEDIA_VIDEO_SOURCES
  ${CMAKE_CURRENT_LIST_DIR}/video_sampling.cc
  ${CMAKE_CURRENT_LIST_DIR}/video_decode.cc)
list(APPEND TF_MEDIA_VIDEO_LIBS PkgConfig::TF_FFMPEG)
