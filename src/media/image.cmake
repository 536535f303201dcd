# Image sources of tf_media: data: URLs, decoding (PNG, JPEG, WebP, GIF), the
# EXIF orientation, the torch-compatible bicubic resize, smart_resize and the
# vision preprocessing (normalise + patchify).
list(APPEND TF_MEDIA_IMAGE_SOURCES
  ${CMAKE_CURRENT_LIST_DIR}/data_url.cc
  ${CMAKE_CURRENT_LIST_DIR}/image_decode.cc
  ${CMAKE_CURRENT_LIST_DIR}/png_decode.cc
  ${CMAKE_CURRENT_LIST_DIR}/jpeg_decode.cc
  ${CMAKE_CURRENT_LIST_DIR}/webp_decode.cc
  ${CMAKE_CURRENT_LIST_DIR}/gif_decode.cc
  ${CMAKE_CURRENT_LIST_DIR}/exif_orientation.cc
  ${CMAKE_CURRENT_LIST_DIR}/bicubic_resize.cc
  ${CMAKE_CURRENT_LIST_DIR}/smart_resize.cc
  ${CMAKE_CURRENT_LIST_DIR}/vision_preprocess.cc)
# Beyond libpng/libjpeg/libwebp (pkg-config'd in CMakeLists.txt): libwebpdemux for the
# first frame of animated WebP, and giflib (Debian ships no .pc file for it).
pkg_check_modules(TF_IMAGE_EXTRA_LIBS REQUIRED IMPORTED_TARGET libwebpdemux)
find_path(TF_GIF_INCLUDE_DIR gif_lib.h REQUIRED)
find_library(TF_GIF_LIBRARY NAMES gif REQUIRED)
list(APPEND TF_MEDIA_IMAGE_LIBS PkgConfig::TF_IMAGE_EXTRA_LIBS ${TF_GIF_LIBRARY})
list(APPEND TF_MEDIA_INCLUDE_DIRS ${TF_GIF_INCLUDE_DIR})
