// Precompiled header: the heavy LibTorch headers, parsed once per build.
#pragma once
#include <ATen/ATen.h>
#include <torch/nn/module.h>
#include <torch/optim.h>
#include <fmt/format.h>
#include <spdlog/spdlog.h>
