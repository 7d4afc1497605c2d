export {
  startMockHub,
  mockHubEnv,
  sha256Hex,
  gitBlobId,
  type MockHub,
  type MockRepo,
  type MockFault,
  type MockRequest,
  type SparseFile,
} from "./mock-hub.js";
