# cmake -P tests/tools/print_gencode.cmake: prints what TF_CUDA_GENCODE=auto resolves to on
# this machine (tests/tools/cuda_gencode_test.py runs it with stand-in nvidia-smi programs).
include(${CMAKE_CURRENT_LIST_DIR}/../../cmake/cuda_gencode.cmake)
tf_detect_gencode(codes)
message(STATUS "gencode=[${codes}]")
