// GoogleTest helpers for llmc::Status.
#pragma once

#include <gtest/gtest.h>

#include "llmc/status.h"

// Fails the test (and returns) when `expr` is not ok, printing the status.
#define ASSERT_OK(expr)                                                \
  do {                                                                 \
    ::llmc::Status assert_ok_status = (expr);                          \
    ASSERT_TRUE(assert_ok_status.ok()) << assert_ok_status.toString(); \
  } while (0)
